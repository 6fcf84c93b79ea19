"""DVC entry point for the 'specs' stage: `python stages/specs.py` = `recipematch specs`."""

import sys

from recipematch.cli import main

if __name__ == "__main__":
    main(["specs", *sys.argv[1:]])
