"""The 1D, 2D (SUMMA), 2.5D (Tesseract) and 3D linear layers, forward and backward written out."""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from labkit.intra_layer.multidim.collectives import (
    group_all_gather,
    group_all_reduce,
    group_broadcast,
    group_reduce,
    group_reduce_scatter,
)
from labkit.intra_layer.multidim.mesh import Mesh


class _Column1D(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, w, b, mesh):
        ctx.save_for_backward(x, w)
        ctx.mesh = mesh
        return torch.addmm(b, x, w)

    @staticmethod
    def backward(ctx, dy):
        x, w = ctx.saved_tensors
        dx = group_all_reduce(dy @ w.T, ctx.mesh.groups["world"])  # Megatron's f: identity forward, all-reduce back
        return dx, x.T @ dy, dy.sum(0), None


class _Row1D(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, w, b, mesh):
        ctx.save_for_backward(x, w)
        return group_all_reduce(x @ w, mesh.groups["world"]).add_(b)  # Megatron's g: all-reduce forward

    @staticmethod
    def backward(ctx, dy):
        x, w = ctx.saved_tensors
        return dy @ w.T, x.T @ dy, dy.sum(0), None  # dy is the same on every rank: db needs no collective


class _Summa(torch.autograd.Function):
    """2d and 2.5d: SUMMA inside this rank's layer of the grid."""

    @staticmethod
    def forward(ctx, x, w, b, mesh):
        ctx.save_for_backward(x, w)
        ctx.mesh = mesh
        i, j, row, col = mesh.coords["i"], mesh.coords["j"], mesh.groups["row"], mesh.groups["col"]
        y = x.new_zeros((x.shape[0], w.shape[1]))
        for k in range(mesh.grid.q):
            xk = group_broadcast(x if j == k else torch.empty_like(x), k, row)  # X_ik along grid row i
            wk = group_broadcast(w if i == k else torch.empty_like(w), k, col)  # W_kj down grid column j
            y.addmm_(xk, wk)
        return y.add_(b)

    @staticmethod
    def backward(ctx, dy):
        x, w = ctx.saved_tensors
        mesh, dy = ctx.mesh, dy.contiguous()
        i, j, row, col = mesh.coords["i"], mesh.coords["j"], mesh.groups["row"], mesh.groups["col"]
        dx = dw = None
        for k in range(mesh.grid.q):  # dX_ik = sum_j dY_ij W_kj^T, summed onto rank (i, k)
            wk = group_broadcast(w if i == k else torch.empty_like(w), k, col)
            part = group_reduce(dy @ wk.T, k, row)
            dx = part if j == k else dx
        for k in range(mesh.grid.q):  # dW_kj = sum_i X_ik^T dY_ij, summed onto rank (k, j)
            xk = group_broadcast(x if j == k else torch.empty_like(x), k, row)
            part = group_reduce(xk.T @ dy, k, col)
            dw = part if i == k else dw
        dw = group_all_reduce(dw, mesh.groups["depth"])  # 2.5d: W is replicated over the d layers
        return dx, dw, group_all_reduce(dy.sum(0), mesh.groups["coldepth"]), None


class _Cube(torch.autograd.Function):
    """3d: all-gather X over the input axis and W over i, multiply, reduce-scatter Y over the output axis."""

    @staticmethod
    def forward(ctx, x, w, b, mesh, layer):
        ctx.save_for_backward(x, w)  # only this rank's pieces: 1/q^3 of each
        ctx.mesh, ctx.layer = mesh, layer
        gx, gw, gy = _cube_groups(mesh, layer)
        return group_reduce_scatter(group_all_gather(x, gx) @ group_all_gather(w, gw), gy).add_(b)

    @staticmethod
    def backward(ctx, dy):
        x, w = ctx.saved_tensors
        gx, gw, gy = _cube_groups(ctx.mesh, ctx.layer)
        dy = group_all_gather(dy, gy)
        xg, wg = group_all_gather(x, gx), group_all_gather(w, gw)  # gathered again, not kept from forward
        dx, dw = group_reduce_scatter(dy @ wg.T, gx), group_reduce_scatter(xg.T @ dy, gw)
        return dx, dw, group_all_reduce(dy.sum(0), gw), None, None


def _cube_groups(mesh: Mesh, layer: int) -> tuple[Any, Any, Any]:
    g = mesh.groups
    return (g["gj"], g["gi"], g["gl"]) if layer == 0 else (g["gl"], g["gi"], g["gj"])


def linear(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor, mesh: Mesh, layer: int = 0) -> torch.Tensor:
    """This rank's block of ``x @ W + b``; ``layer`` 0 or 1 is the place in the MLP (1d: column or row)."""
    mode = mesh.grid.mode
    if mode == "1d":
        return (_Column1D if layer == 0 else _Row1D).apply(x, w, b, mesh)
    if mode == "3d":
        return _Cube.apply(x, w, b, mesh, layer)
    return _Summa.apply(x, w, b, mesh)


def mlp(x: torch.Tensor, params: dict[str, torch.Tensor], mesh: Mesh) -> torch.Tensor:
    """Linear(h, f) -> GeLU -> Linear(f, h), each linear in the mesh's mode."""
    z = F.gelu(linear(x, params["w1"], params["b1"], mesh, 0))
    return linear(z, params["w2"], params["b2"], mesh, 1)
