"""Lance data files 2.1 and 2.2 ("structural" encodings): page layouts, codecs, levels."""
