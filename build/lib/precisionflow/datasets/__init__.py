"""Data set loaders: digits (inside scikit-learn) and image_folder (a user's class folders)."""
