"""Lance data files: one reader per file format (legacy 0.1, v2.x), behind one interface."""
