"""DVC entry point of the 'judging' stage: `python stages/judging.py --name <name>` (= `recipematch judging`)."""

from recipematch.pipeline.judging import main

if __name__ == "__main__":
    main()
