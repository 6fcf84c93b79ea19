"""DVC entry point of the 'validate' stage: `python stages/validate.py [options]` (= `recipematch validate`)."""

from recipematch.pipeline.validate import main

if __name__ == "__main__":
    main()
