"""DVC entry point of the 'replay_pool' stage: `python stages/replay_pool.py [options]`."""

from recipematch.pipeline.replay_pool import main

if __name__ == "__main__":
    main()
