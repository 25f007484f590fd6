"""app/api/libretranslate."""
