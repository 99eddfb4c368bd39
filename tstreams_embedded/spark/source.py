"""The ``tstreams`` Python data source: the entry point Spark instantiates with the options."""

from __future__ import annotations

from typing import Any

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
)

from ..errors import InvalidArgument
from .options import check_unknown, parse_decoding, parse_read, parse_write
from .reader import TStreamsBatchReader
from .rows import schema_ddl
from .staging import input_columns
from .stream_reader import TStreamsStreamReader
from .writer import TStreamsBatchWriter, TStreamsStreamWriter, check_output_stream


class TStreamsDataSource(DataSource):
    """Format ``"tstreams"``: batch and streaming reads and writes of a T-stream.

    See ``docs/SPARK.md`` for the options, the schema and the guarantees.
    """

    @classmethod
    def name(cls) -> str:
        return "tstreams"

    def schema(self) -> str:
        check_unknown(self.options)
        return schema_ddl(parse_decoding(self.options))

    def reader(self, schema: Any) -> DataSourceReader:
        check_unknown(self.options)
        return TStreamsBatchReader(parse_read(self.options, streaming=False))

    def streamReader(self, schema: Any) -> DataSourceStreamReader:
        check_unknown(self.options)
        return TStreamsStreamReader(parse_read(self.options, streaming=True))

    def writer(self, schema: Any, overwrite: bool) -> DataSourceWriter:
        check_unknown(self.options)
        if overwrite:
            raise InvalidArgument(
                "tstreams streams are append-only: use mode('append') (mode 'overwrite' is not supported)"
            )
        input_columns(schema)
        options = parse_write(self.options, streaming=False)
        check_output_stream(options.target)
        return TStreamsBatchWriter(options, schema)

    def streamWriter(self, schema: Any, overwrite: bool) -> DataSourceStreamWriter:
        check_unknown(self.options)
        input_columns(schema)
        options = parse_write(self.options, streaming=True)
        check_output_stream(options.target)
        return TStreamsStreamWriter(options, schema)
