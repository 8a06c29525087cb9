"""Reading and checking HF safetensors checkpoints for /update_weights_from_disk.

The embedded engine reads every shard, checks each tensor against the live model and copies
them in place (`read_weights`, `copy_weights_in_place`); the sim engine reads every byte and
checks only what a real loader would trip over first (`read_safetensors_dir`). Both refuse a
bad directory with a message the caller returns to the client, keeping the old weights.
"""

from __future__ import annotations

import json
import os
import struct
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tandem.moe import from_checkpoint_names

if TYPE_CHECKING:  # torch is imported where used: the sim engine reads checkpoints without it
    import torch

_READ_CHUNK = 16 << 20


class WeightLoadError(RuntimeError):
    """A weight directory that cannot be swapped in; the message is returned to the caller."""


def _shard_files(root: Path) -> list[Path]:
    """The directory's safetensors shards: those its index names, else every *.safetensors."""
    files = sorted(root.glob("*.safetensors"))
    index = root / "model.safetensors.index.json"
    if index.exists():
        try:
            names = sorted(set(json.loads(index.read_text())["weight_map"].values()))
        except (ValueError, KeyError) as err:
            raise WeightLoadError(f"unreadable {index.name}: {err}") from None
        files = [root / n for n in names]
    if not files:
        raise WeightLoadError("no *.safetensors files in the directory")
    return files


def _live_tensors(model: Any) -> dict[str, torch.Tensor]:
    live = dict(model.named_parameters())
    live.update(dict(model.named_buffers()))
    return live


def read_weights(model: Any, model_path: str, load_format: str | None,
                 device: torch.device) -> dict[str, torch.Tensor]:
    """Read every safetensors shard of an HF directory and check it against the live model;
    returns the tensors on `device` in the model's dtypes. Raises WeightLoadError."""
    if load_format not in (None, "auto", "safetensors"):
        raise WeightLoadError(f"load_format {load_format!r} is not supported (use safetensors)")
    root = Path(model_path)
    if not root.is_dir():
        raise WeightLoadError("the directory does not exist")
    live = _live_tensors(model)
    out: dict[str, torch.Tensor] = {}
    for name, (where, t) in _checkpoint_tensors(_shard_files(root)).items():
        if name not in live:
            raise WeightLoadError(f"{where}: tensor {name!r} is not a parameter of the served model")
        if tuple(t.shape) != tuple(live[name].shape):
            raise WeightLoadError(f"{where}: tensor {name!r} has shape {tuple(t.shape)}, "
                                  f"the model has {tuple(live[name].shape)}")
        out[name] = t.to(device=device, dtype=live[name].dtype)
    tied = tied_parameter_names(model)
    missing = [n for n, _ in model.named_parameters() if n not in out and n not in tied]
    if missing:
        raise WeightLoadError(f"{len(missing)} parameter(s) missing, e.g. {missing[:3]}")
    return out


def _checkpoint_tensors(files: list[Path]) -> dict[str, tuple[str, torch.Tensor]]:
    """{name: (the file it came from, tensor)} of every shard, per-expert MoE tensors stacked into the
    fused layout the live model holds (tandem.moe). Raises WeightLoadError."""
    from safetensors import safe_open

    found: dict[str, tuple[str, torch.Tensor]] = {}
    for f in files:
        try:
            with safe_open(str(f), framework="pt", device="cpu") as sf:
                for name in sf.keys():
                    found[name] = (f.name, sf.get_tensor(name))
        except Exception as err:  # corrupt / truncated files, missing shards
            raise WeightLoadError(f"{f.name}: {err}") from None
    try:
        fused = from_checkpoint_names({name: t for name, (_, t) in found.items()})
    except ValueError as err:
        raise WeightLoadError(str(err)) from None
    return {name: (found[name][0] if name in found else "experts", t) for name, t in fused.items()}


def tied_parameter_names(model: Any) -> set[str]:
    """Parameters that share storage with another one (tied embeddings) need not be in the file."""
    seen: dict[int, str] = {}
    tied: set[str] = set()
    for name, p in model.named_parameters(remove_duplicate=False):
        key = p.data_ptr()
        if key in seen:
            tied.add(name)
            tied.add(seen[key])
        else:
            seen[key] = name
    return tied


def copy_weights_in_place(model: Any, tensors: dict[str, torch.Tensor]) -> None:
    """Copy checked tensors into the live model (tied parameters are written once)."""
    import torch

    live = _live_tensors(model)
    with torch.no_grad():
        for name, t in tensors.items():
            live[name].copy_(t)


def free_parameters(model: Any) -> dict[str, tuple[int, ...]]:
    """Drop every parameter's storage (tied ones once: they are one Parameter), keeping the Parameter
    objects the modules hold; returns their shapes for `allocate_parameters`. Buffers (rotary tables,
    not in the checkpoint) are small and stay."""
    import torch

    shapes: dict[str, tuple[int, ...]] = {}
    for name, p in model.named_parameters():
        shapes[name] = tuple(p.shape)
        p.data = torch.empty(0, dtype=p.dtype, device=p.device)
    return shapes


def allocate_parameters(model: Any, shapes: dict[str, tuple[int, ...]]) -> None:
    """Give freed parameters storage of their shapes again; the values are whatever the memory held
    (a load fills them)."""
    import torch

    for name, p in model.named_parameters():
        if name in shapes:
            p.data = torch.empty(shapes[name], dtype=p.dtype, device=p.device)


def return_freed_memory(device: Any) -> None:
    """Hand memory freed by dropped tensors back to the system: CUDA's caching allocator keeps it
    otherwise, and glibc's malloc keeps freed heap chunks below its mmap threshold (which grows to
    32 MiB after a large free) unless asked to trim."""
    import gc

    import torch

    gc.collect()
    if getattr(device, "type", str(device)) == "cuda":
        torch.cuda.empty_cache()
        return
    try:
        import ctypes

        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):  # not glibc: the allocator returns what it returns
        pass


def read_safetensors_dir(path: str | os.PathLike) -> tuple[int, int]:
    """Read every byte of an HF safetensors checkpoint directory; returns (bytes, files).

    Checks what a real loader would trip over first (config.json present, at least one
    *.safetensors, each with a parseable header whose data fits the file) so the sim fails a
    bad version the way an engine would, and reads the data so the disk cost is real.
    """
    d = Path(path)
    if not d.is_dir():
        raise ValueError(f"{d} is not a directory")
    if not (d / "config.json").exists():
        raise ValueError(f"{d} has no config.json")
    files = sorted(d.glob("*.safetensors"))
    if not files:
        raise ValueError(f"{d} has no *.safetensors files")
    total = 0
    view = memoryview(bytearray(_READ_CHUNK))
    for f in files:
        total += _read_checked(f, view)
    return total, len(files)


def _read_checked(f: Path, buf: memoryview) -> int:
    """Check one file's safetensors header against its size, then read it all through `buf`;
    returns its size."""
    size = f.stat().st_size
    with open(f, "rb", buffering=0) as fh:
        head = fh.read(8)
        if len(head) != 8:
            raise ValueError(f"{f.name} is truncated")
        (hlen,) = struct.unpack("<Q", head)
        if hlen > size - 8:
            raise ValueError(f"{f.name} has a corrupt header")
        header = json.loads(fh.read(hlen))
        end = max((int(v["data_offsets"][1]) for k, v in header.items() if k != "__metadata__"), default=0)
        if 8 + hlen + end > size:
            raise ValueError(f"{f.name} is truncated ({size} bytes, header needs {8 + hlen + end})")
        while fh.readinto(buf):
            pass
    return size


__all__ = ["WeightLoadError", "allocate_parameters", "copy_weights_in_place", "free_parameters",
           "read_safetensors_dir", "read_weights", "return_freed_memory", "tied_parameter_names"]
