# Type stubs for posix_ipc, a C extension that ships none: its shared memory part, which
# probe_wire/writer.py uses (posix_ipc 1.3's documented API; semaphores and queues left out).

O_CREAT: int
O_EXCL: int
O_CREX: int
O_TRUNC: int
PAGE_SIZE: int

class Error(Exception): ...
class ExistentialError(Error): ...
class PermissionsError(Error): ...

class SharedMemory:
    name: str
    mode: int
    size: int
    fd: int
    def __init__(
        self, name: str | None, flags: int = 0, mode: int = 0o600, size: int = 0, read_only: bool = False
    ) -> None: ...
    def close_fd(self) -> None: ...
    def unlink(self) -> None: ...

def unlink_shared_memory(name: str) -> None: ...
