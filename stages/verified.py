"""DVC entry point for the 'verified' stage: `python stages/verified.py [options]` = `recipematch verified`."""

import sys

from recipematch.cli import main

if __name__ == "__main__":
    main(["verified", *sys.argv[1:]])
