"""DVC entry point of the 'report' stage: `python stages/report.py [options]` (= `recipematch report`)."""

from recipematch.pipeline.report import main

if __name__ == "__main__":
    main()
