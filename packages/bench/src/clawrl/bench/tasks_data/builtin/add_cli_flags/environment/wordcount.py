"""Count words in a file."""
import sys


def main() -> None:
    path = sys.argv[1]
    with open(path, encoding="utf-8") as fh:
        text = fh.read()
    print(len(text.split()))


if __name__ == "__main__":
    main()
