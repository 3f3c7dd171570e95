#!/bin/bash
set -euo pipefail
mkdir -p output
{
  echo "directory,bytes,files"
  for d in data/*/; do
    name=$(basename "$d")
    bytes=$(find "$d" -type f -printf '%s\n' | awk '{s+=$1} END {print s+0}')
    files=$(find "$d" -type f | wc -l)
    echo "$name,$bytes,$files"
  done | sort -t, -k2,2nr
} > output/usage.csv
find data -type f -printf '%s %P\n' | sort -nr | head -1 | cut -d' ' -f2- > output/largest.txt
