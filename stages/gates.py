"""DVC entry point for the 'gates' stage: `python stages/gates.py [options]` = `recipematch gates`."""

import sys

from recipematch.cli import main

if __name__ == "__main__":
    main(["gates", *sys.argv[1:]])
