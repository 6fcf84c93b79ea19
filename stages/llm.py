"""DVC entry point of the 'llm' stage: `python stages/llm.py [options]` (= `recipematch llm`)."""

from recipematch.pipeline.llm import main

if __name__ == "__main__":
    main()
