"""DVC entry point for the 'evalsets' stage: `python stages/evalsets.py [options]` = `recipematch evalsets`."""

import sys

from recipematch.cli import main

if __name__ == "__main__":
    main(["evalsets", *sys.argv[1:]])
