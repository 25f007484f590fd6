"""File translation: formats (the texts of a file, and the file rebuilt around their translations), one
translation call per file, and the store that keeps a translated file for its download."""
