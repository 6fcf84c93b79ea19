"""DVC entry point of the 'judge2' stage: `python stages/judge2.py [options]` (= `recipematch judge2`)."""

from recipematch.pipeline.judge2 import main

if __name__ == "__main__":
    main()
