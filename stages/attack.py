"""DVC entry point of the 'attack' stage: `python stages/attack.py --name KEY` (= `recipematch attack`)."""

from recipematch.pipeline.attack import main

if __name__ == "__main__":
    main()
