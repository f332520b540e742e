"""Lance 2.0 data files: page decoders (`decode`) and encoders (`encode`), random access
into pages, and the reader and writer over the shared container (`format.file.container`)."""

from quiver.format.file.container import ColumnInfo, Footer, Page, V2Container
from quiver.format.file.v20.reader import V2FileReader
from quiver.format.file.v20.writer import V2FileWriter

__all__ = ["ColumnInfo", "Footer", "Page", "V2Container", "V2FileReader", "V2FileWriter"]
