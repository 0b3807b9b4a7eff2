"""Configuration composition: Hydra groups and a user's files into one checked config per sweep
point (compose.py, user_files.py). The keys and their types are precisionflow/schema.py, on the
ground floor, since the library reads them too."""
