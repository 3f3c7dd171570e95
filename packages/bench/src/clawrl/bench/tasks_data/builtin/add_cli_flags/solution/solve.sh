#!/bin/bash
set -euo pipefail
cat > wordcount.py <<'EOF'
"""Count words, lines or characters in a file."""
import argparse


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("file")
    parser.add_argument("--words", action="store_true")
    parser.add_argument("--lines", action="store_true")
    parser.add_argument("--chars", action="store_true")
    args = parser.parse_args()
    try:
        with open(args.file, encoding="utf-8") as fh:
            text = fh.read()
    except OSError as exc:
        parser.exit(2, f"wordcount: {exc}\n")
    if not (args.words or args.lines or args.chars):
        args.words = True
    if args.words:
        print(len(text.split()))
    if args.lines:
        print(len(text.splitlines()))
    if args.chars:
        print(len(text))


if __name__ == "__main__":
    main()
EOF
