"""DVC entry point for the 'report' stage: `python stages/report.py [options]` = `recipematch report`."""

import sys

from recipematch.cli import main

if __name__ == "__main__":
    main(["report", *sys.argv[1:]])
