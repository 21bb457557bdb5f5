"""The PyTorch tensors both sides of the torch transport tests make, the same in every process:
several dtypes, shapes and layouts, from a fixed seed."""

import torch


def tensors():
    g = torch.Generator().manual_seed(11)
    base = torch.randn(64, 48, generator=g)
    image = torch.randn(2, 3, 8, 8, generator=g)
    return [
        base,                                                   # float32, 2-D
        base.to(torch.bfloat16),                                # bfloat16
        base.to(torch.float16)[:, ::3],                         # float16, a strided slice
        (base * 50).to(torch.int8),                             # int8
        torch.arange(-1000, 1000, 7, dtype=torch.int64),        # int64, 1-D
        base.t(),                                               # a transposed view
        image.to(memory_format=torch.channels_last),            # channels-last layout
        torch.complex(base, -base)[:5],                         # complex64
        base > 0,                                               # bool
        torch.tensor(3.25, dtype=torch.float64),                # a 0-d scalar
        torch.empty(0, 7, dtype=torch.int32),                   # empty
        torch.randint(0, 255, (1 << 20,), generator=g, dtype=torch.uint8),  # 1 MiB
    ]
