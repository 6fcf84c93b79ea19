"""DVC entry point for the 'evaluate' stage: `python stages/evaluate.py [options]` = `recipematch evaluate-arm`."""

import sys

from recipematch.cli import main

if __name__ == "__main__":
    main(["evaluate-arm", *sys.argv[1:]])
