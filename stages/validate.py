"""DVC entry point for the 'validate' stage: `python stages/validate.py [options]` = `recipematch validate`."""

import sys

from recipematch.cli import main

if __name__ == "__main__":
    main(["validate", *sys.argv[1:]])
