"""Lance v2.x data files: the shared container plus the 2.0 page decoders and encoders."""

from format.file.v2.container import ColumnInfo, Footer, Page, V2Container
from format.file.v2.reader import V2FileReader
from format.file.v2.writer import V2FileWriter

__all__ = ["ColumnInfo", "Footer", "Page", "V2Container", "V2FileReader", "V2FileWriter"]
