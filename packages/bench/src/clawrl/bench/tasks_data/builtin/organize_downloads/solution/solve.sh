#!/bin/bash
set -euo pipefail
cd downloads
mkdir -p images docs archives
shopt -s nocaseglob
for f in *.png *.jpg *.gif; do mv -- "$f" images/; done
for f in *.pdf *.docx *.txt; do mv -- "$f" docs/; done
for f in *.zip *.tar.gz; do mv -- "$f" archives/; done
