"""Encoders: turning texts into dense vectors (or sparse term weights)."""
