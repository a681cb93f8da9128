"""Files: atomic state files, locks, provenance. The package writes files only through here."""
