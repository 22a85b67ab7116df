"""An RGBA byte image that a raster canvas draws by nearest-neighbour lookup, without floats.

Matplotlib (3.11) draws an `imshow` of bytes on a raster canvas by converting it to float32,
premultiplying by alpha, resampling, dividing the alpha back out and converting to bytes again:
about ten passes over the output's pixels in floating point (a 14-inch Gantt chart at 150 dpi is
3.8 million of them, ~1 s). A Gantt chart's raster is opaque and drawn with
``interpolation="none"``, so each output pixel is one source pixel: `PixelImage` picks them with
two index arrays. Vector canvases (SVG, PDF) take the unsampled path as before.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from matplotlib.image import AxesImage
from matplotlib.transforms import Bbox, IdentityTransform, TransformedBbox


class PixelImage(AxesImage):
    """An `AxesImage` of opaque uint8 RGBA data, ``origin="upper"``, drawn by index lookup on
    raster canvases."""

    def make_image(self, renderer: Any, magnification: float = 1.0, unsampled: bool = False) -> Any:
        data = self.get_array()  # a masked array; indexing one costs 20x its data's
        data = None if data is None else np.ma.getdata(data)
        if unsampled or data is None or data.dtype != np.uint8 or data.ndim != 3 or self.origin != "upper":
            return super().make_image(renderer, magnification, unsampled)
        x1, x2, y1, y2 = self.get_extent()
        box = TransformedBbox(Bbox([[x1, y1], [x2, y2]]), self.get_transform())
        clip = (self.get_clip_box() or self.axes.bbox) if self.get_clip_on() else self.get_figure(root=True).bbox
        shown = Bbox.intersection(box, clip)
        if shown is None or box.width <= 0 or box.height <= 0:
            return None, 0, 0, None
        left, bottom = int(np.floor(shown.x0)), int(np.floor(shown.y0))
        width, height = int(np.ceil(shown.x1)) - left, int(np.ceil(shown.y1)) - bottom
        if width <= 0 or height <= 0:
            return None, 0, 0, None
        rows, cols = data.shape[:2]
        # pixel centres in display units; the renderer takes row 0 as the bottom row
        x = left + np.arange(width) + 0.5
        y = bottom + np.arange(height) + 0.5
        col = np.clip(((x - box.x0) / box.width * cols).astype(np.int64), 0, cols - 1)
        row = np.clip(((box.y1 - y) / box.height * rows).astype(np.int64), 0, rows - 1)
        return data[row[:, None], col[None, :]], left, bottom, IdentityTransform()


def pixel_imshow(ax: Any, image: np.ndarray, extent: tuple[float, float, float, float]) -> PixelImage:
    """`ax.imshow(image, aspect="auto", interpolation="none", extent=extent, origin="upper")`, drawn
    as a `PixelImage`."""
    artist = PixelImage(ax, interpolation="none", origin="upper", extent=extent)
    artist.set_data(image)
    artist.set_clip_path(ax.patch)
    ax.add_image(artist)
    ax.set_aspect("auto")
    ax.set_xlim(extent[0], extent[1])
    ax.set_ylim(extent[2], extent[3])
    return artist
