"""Glossaries stored by id (POST /glossaries, as DeepL's): the store, and their request and response bodies."""
