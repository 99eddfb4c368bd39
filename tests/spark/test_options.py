"""Bad options and unknown streams fail with a message that names the option."""

from __future__ import annotations

import pytest

from tstreams_embedded.errors import InvalidArgument
from tstreams_embedded.spark.options import parse_read, parse_write


@pytest.mark.parametrize("options,match", [
    ({"stream": "s"}, "exactly one of the options 'path'"),
    ({"path": "/x", "endpoint": "tcp://h:1", "stream": "s"}, "exactly one of the options 'path'"),
    ({"endpoint": "h:1", "stream": "s"}, "option 'endpoint' must look like tcp://"),
    ({"path": "/x"}, "option 'stream' is required"),
    ({"path": "/x", "stream": "s", "startingOffsets": "yesterday"}, "option 'startingOffsets'"),
    ({"path": "/x", "stream": "s", "startingOffsets": "{bad json"}, "option 'startingOffsets' is not valid JSON"),
    ({"path": "/x", "stream": "s", "startingOffsets": '{"a": 1}'}, "keys must be partition numbers"),
    ({"path": "/x", "stream": "s", "startingOffsets": '{"0": -5}'}, "must be >= 0"),
    ({"path": "/x", "stream": "s", "startingOffsets": "[1]"}, "option 'startingOffsets'"),
    ({"path": "/x", "stream": "s", "endingOffsets": "oldest"}, "option 'endingOffsets'"),
    ({"path": "/x", "stream": "s", "valueFormat": "avro"}, "option 'valueFormat' must be one of"),
    ({"path": "/x", "stream": "s", "partitions": "0,x"}, "option 'partitions'"),
    ({"path": "/x", "stream": "s", "rowsPerSplit": "0"}, "option 'rowsPerSplit'"),
    ({"path": "/x", "stream": "s", "maxRowsPerTrigger": "10"}, "option 'maxRowsPerTrigger' applies only"),
    ({"path": "/x", "stream": "s", "mode": "lenient", "valueFormat": "json"}, "option 'mode' must be one of"),
    ({"path": "/x", "stream": "s", "mode": "permissive"}, "option 'mode' 'permissive' needs option 'valueFormat'"),
    ({"path": "/x", "stream": "s", "valueFormat": "json", "columnNameOfCorruptRecord": "bad"},
     "option 'columnNameOfCorruptRecord' goes with option 'mode' 'permissive'"),
    ({"path": "/x", "stream": "s", "valueFormat": "json", "mode": "PERMISSIVE", "columnNameOfCorruptRecord": "Seq"},
     "is the name of another column"),
    ({"endpoint": "tcp://h:1", "stream": "s", "timeout": "nan"}, "option 'timeout' must be a number of seconds"),
    ({"endpoint": "tcp://h:1", "stream": "s", "timeout": "inf"}, "option 'timeout' must be a number of seconds"),
    ({"endpoint": "tcp://h:1", "stream": "s", "timeout": "1e308"}, "option 'timeout' must be a number of seconds"),
    ({"endpoint": "tcp://h:1", "stream": "s", "timeout": "0"}, "option 'timeout' must be a number of seconds"),
])
def test_bad_batch_read_options(options, match):
    with pytest.raises(InvalidArgument, match=match):
        parse_read(options, streaming=False)


@pytest.mark.parametrize("options,match", [
    ({"path": "/x", "stream": "s", "maxRowsPerTrigger": "many"}, "option 'maxRowsPerTrigger'"),
    ({"path": "/x", "stream": "s", "maxRowsPerTrigger": "-1"}, "option 'maxRowsPerTrigger'"),
    ({"path": "/x", "stream": "s", "endingOffsets": "newest"}, "option 'endingOffsets' applies only"),
])
def test_bad_stream_read_options(options, match):
    with pytest.raises(InvalidArgument, match=match):
        parse_read(options, streaming=True)


@pytest.mark.parametrize("options,streaming,match", [
    ({"path": "/x", "stream": "s"}, True, "option 'checkpointLocation'"),
    ({"path": "/x", "stream": "s", "txnSize": "0"}, False, "option 'txnSize'"),
    ({"path": "/x", "stream": "s", "stagingTtl": "forever"}, False, "option 'stagingTtl'"),
    ({"path": "/x", "stream": "s", "startingOffsets": "oldest"}, False, "only to reads"),
    ({"path": "/x", "stream": "s", "valueFormat": "json"}, False, "option 'valueFormat' of a write"),
    ({"path": "/x", "stream": "s", "mode": "permissive"}, False, "option 'mode' applies only to reads"),
])
def test_bad_write_options(options, streaming, match):
    with pytest.raises(InvalidArgument, match=match):
        parse_write(options, streaming=streaming)


def test_good_options_parse():
    opts = parse_read({"path": "rel/dir", "stream": "s", "startingOffsets": '{"1": 42, "0": "newest"}',
                       "partitions": "1,0,1", "valueFormat": "JSON"}, streaming=False)
    assert opts.partitions == (0, 1)
    assert opts.starting == {"*": "oldest", "1": 42, "0": "newest"}
    assert opts.value_format == "json"
    assert opts.target.path.endswith("/rel/dir")
    w = parse_write({"endpoint": "tcp://127.0.0.1:7000", "stream": "s", "checkpointLocation": "file:///tmp/ck/"},
                    streaming=True)
    assert w.producer_id == "checkpoint:/tmp/ck"


def _load(spark, **options):
    reader = spark.read.format("tstreams")
    for k, v in options.items():
        reader = reader.option(k, v)
    return reader.load()


def test_load_path_argument_is_the_path_option(spark, engine, data_dir):
    engine.create_stream("s", partitions=1)
    engine.producer("s").instant([b"a", b"b"])
    assert spark.read.format("tstreams").option("stream", "s").load(str(data_dir)).count() == 2


def test_errors_reach_the_spark_user(spark, engine, data_dir):
    engine.create_stream("s", partitions=2)
    with pytest.raises(Exception, match="option 'stream': stream 'nope' at path .* does not exist"):
        _load(spark, path=str(data_dir), stream="nope").collect()
    with pytest.raises(Exception, match="option 'partitions': partition 7 is out of range"):
        _load(spark, path=str(data_dir), stream="s", partitions="7").collect()
    with pytest.raises(Exception, match="option 'startingOffsets': partition 9 is out of range"):
        _load(spark, path=str(data_dir), stream="s", startingOffsets='{"9": 1}').collect()
    with pytest.raises(Exception, match="unknown option.*'startingoffset'"):
        _load(spark, path=str(data_dir), stream="s", startingOffset="oldest").collect()
    with pytest.raises(Exception, match="option 'path': .* is not an engine directory"):
        _load(spark, path=str(data_dir / "missing"), stream="s").collect()
    with pytest.raises(Exception, match="option 'valueFormat' must be one of"):
        _load(spark, path=str(data_dir), stream="s", valueFormat="xml").collect()
    with pytest.raises(Exception, match="option 'stream': stream 'nope'"):
        spark.createDataFrame([("x",)], "value string").write.format("tstreams").mode("append") \
            .option("path", str(data_dir)).option("stream", "nope").save()
    with pytest.raises(Exception, match="option 'stream': stream 'nope'"):
        q = spark.readStream.format("tstreams").option("path", str(data_dir)).option("stream", "nope").load() \
            .writeStream.format("console").trigger(availableNow=True).start()
        q.awaitTermination(120)
