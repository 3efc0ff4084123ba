"""pyiceberg's file IO for the capture tables: every object it writes names the capture key (SSE-KMS headers).

Why (docs/capture-processor.md, "Every table write names the capture key"): with ALB access logs accepted
(``CaptureStorage(load_balancer_logs=True)``) the capture bucket's default encryption is SSE-S3, and its policy
refuses every write that does not name the capture key. pyiceberg's ``PyArrowFileIO`` writes through pyarrow's S3
file system, which can send SSE-C headers but not SSE-KMS ones; its ``FsspecFileIO`` sends them (the property
``s3.sse-kms-key-id``) through s3fs, whose aiobotocore pins botocore to a window that excludes the project's
boto3/botocore pin (no install resolves), and would put a second botocore in the tables layer.

So writes go through boto3 (in the Lambda runtime already) and everything else stays pyarrow's: a data file, a
manifest, a manifest list or a table metadata file is spooled (in memory up to :data:`SPOOL_BYTES`, then in the
function's ``/tmp``) and uploaded on close by boto3's transfer manager (``upload_fileobj``: one PutObject, or a
multipart upload past its threshold) with ``ServerSideEncryption=aws:kms`` and ``SSEKMSKeyId``. Reads, existence
checks and deletes are ``PyArrowFileIO``'s. A stream closed by an exception uploads nothing.

Configured by the catalog property ``s3.sse-kms-key-id`` (pyiceberg's own name for it); without it, writes are
``PyArrowFileIO``'s (no headers: the bucket's default, the capture key where ALB logs are not accepted).
"""

from __future__ import annotations

import tempfile
from types import TracebackType
from typing import IO, Any
from urllib.parse import urlparse

from pyiceberg.io import S3_ENDPOINT, S3_REGION, S3_SSE_KMS_KEY_ID, FileIO, InputFile, OutputFile, OutputStream
from pyiceberg.io.pyarrow import PyArrowFileIO
from pyiceberg.typedef import EMPTY_DICT, Properties

# What is kept in memory before the spool moves to /tmp (the transfer manager's part size, 8 MiB, is the same).
SPOOL_BYTES = 8 * 1024 * 1024
S3_SCHEMES = frozenset({"s3", "s3a", "s3n"})


class SseKmsFileIO(FileIO):
    """pyiceberg's ``PyArrowFileIO``, but its S3 writes carry the SSE-KMS headers of ``s3.sse-kms-key-id`` (module
    docstring): reads, existence checks and deletes are the PyArrow file IO's."""

    def __init__(self, properties: Properties = EMPTY_DICT) -> None:
        super().__init__(properties)
        self.plain = PyArrowFileIO(properties)
        self._client: Any = None

    def s3_client(self) -> Any:
        """One boto3 S3 client per file IO (thread-safe: pyiceberg writes data files from a thread pool)."""
        if self._client is None:
            import boto3

            self._client = boto3.client("s3", endpoint_url=self.properties.get(S3_ENDPOINT),
                                        region_name=self.properties.get(S3_REGION))
        return self._client

    def new_input(self, location: str) -> InputFile:
        return self.plain.new_input(location)

    def new_output(self, location: str) -> OutputFile:
        key_id = self.properties.get(S3_SSE_KMS_KEY_ID)
        parsed = urlparse(location)
        if not key_id or parsed.scheme not in S3_SCHEMES:
            return self.plain.new_output(location)
        return SseKmsOutputFile(location, parsed.netloc, parsed.path.lstrip("/"), key_id, self,
                                self.plain.new_output(location))

    def delete(self, location: str | InputFile | OutputFile) -> None:
        self.plain.delete(location.location if isinstance(location, SseKmsOutputFile) else location)

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_client"] = None  # a boto3 client does not pickle; made again on first use
        return state


class SseKmsOutputFile(OutputFile):
    """One object to write with SSE-KMS; its reads (length, existence, the input file) are pyarrow's."""

    def __init__(self, location: str, bucket: str, key: str, key_id: str, io: SseKmsFileIO,
                 plain: OutputFile) -> None:
        super().__init__(location)
        self.bucket, self.key, self.key_id = bucket, key, key_id
        self.io, self._plain = io, plain

    def __len__(self) -> int:
        return len(self._plain)

    def exists(self) -> bool:
        return self._plain.exists()

    def to_input_file(self) -> InputFile:
        return self._plain.to_input_file()

    def create(self, overwrite: bool = False) -> OutputStream:
        if not overwrite and self.exists():
            raise FileExistsError(f"Cannot create file, already exists: {self.location}")
        return SseKmsUpload(self)


class SseKmsUpload(OutputStream):
    """A spooled object, uploaded with the SSE-KMS headers when closed (nothing when closed by an exception)."""

    def __init__(self, target: SseKmsOutputFile) -> None:
        self._target = target
        self._spool: IO[bytes] = tempfile.SpooledTemporaryFile(max_size=SPOOL_BYTES)  # noqa: SIM115 (closed below)
        self._closed = False

    def write(self, b: bytes) -> int:
        return self._spool.write(b)

    def tell(self) -> int:  # pyarrow's ParquetWriter asks a Python sink where it is
        return self._spool.tell()

    def flush(self) -> None:
        """Nothing to flush before close: the object is uploaded whole."""

    def writable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return False

    def readable(self) -> bool:
        return False

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            self._spool.seek(0)
            target = self._target
            target.io.s3_client().upload_fileobj(
                self._spool, target.bucket, target.key,
                ExtraArgs={"ServerSideEncryption": "aws:kms", "SSEKMSKeyId": target.key_id})
        finally:
            self._spool.close()

    def abort(self) -> None:
        """Drop what was written: nothing reaches S3."""
        self._closed = True
        self._spool.close()

    def __enter__(self) -> SseKmsUpload:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc_value: BaseException | None,
                 traceback: TracebackType | None) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()
