#!/bin/bash
# solved when hello.txt in the workspace holds the word hello
[ "$(cat hello.txt 2>/dev/null)" = "hello" ]
