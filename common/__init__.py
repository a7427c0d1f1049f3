"""Helpers every package may use: free of TensorFlow and tf-slim (files, progress, command
line, machine facts)."""
