"""Captcha-style text pictures rendered with Pillow, for the ddddocr models.

ddddocr's models were trained on web captchas: a few letters and digits, each in its own
colour, tilted and jittered, over a light or photographic background crossed by lines
and dots. `render` draws such a picture in real TrueType fonts (imaging.fonts()) over a
lightened window of a real photo or a plain light colour; `render_click` scatters a few
large characters over a photo, as click-captchas do (for the detector). Both return the
text and each character's box, so the OCR and the detector can be scored. A seeded
generator picks text, fonts, colours and positions: every run makes the same pictures.
"""
from PIL import Image, ImageDraw, ImageFont

from imaging import crop, fonts, photo

# letters and digits as captchas use them: without 0/O, 1/I/l, which people confuse
ALPHABET = "23456789abcdefghjkmnpqrstuvwxyzABCDEFGHJKLMNPQRSTUVWXYZ"
BACKGROUND_PHOTOS = ("coffee", "chelsea", "rocket", "china", "flower", "motorcycle")


def _background(rng, width: int, height: int) -> Image.Image:
    light = tuple(int(v) for v in rng.integers(205, 256, 3))
    if rng.random() < 0.5:
        return Image.new("RGB", (width, height), light)
    name = BACKGROUND_PHOTOS[rng.integers(len(BACKGROUND_PHOTOS))]
    window = crop(photo(name), *rng.uniform(0.2, 0.8, 2), *rng.uniform(0.3, 0.6, 2))
    picture = Image.fromarray(window).resize((width, height), Image.BILINEAR)
    # washed out towards a light colour, as captcha backgrounds are, so text stays legible
    return Image.blend(picture, Image.new("RGB", (width, height), light), 0.65)


def _glyph(char: str, font: ImageFont.FreeTypeFont, colour: tuple, angle: float):
    left, top, right, bottom = font.getbbox(char)
    tile = Image.new("RGBA", (right - left + 8, bottom - top + 8), (0, 0, 0, 0))
    ImageDraw.Draw(tile).text((4 - left, 4 - top), char, font=font, fill=colour + (255,))
    return tile.rotate(angle, resample=Image.BICUBIC, expand=True)


def _noise(rng, draw: ImageDraw.ImageDraw, width: int, height: int) -> None:
    for _ in range(rng.integers(1, 4)):  # interfering lines
        colour = tuple(int(v) for v in rng.integers(40, 200, 3))
        ends = [(int(rng.integers(0, width)), int(rng.integers(0, height))) for _ in range(2)]
        draw.line(ends, fill=colour, width=int(rng.integers(1, 3)))
    for _ in range(rng.integers(20, 80)):  # dots
        x, y = int(rng.integers(0, width)), int(rng.integers(0, height))
        draw.point((x, y), fill=tuple(int(v) for v in rng.integers(0, 255, 3)))


def render(rng, length: int | None = None):
    """One captcha: (RGB PIL image, text, [(x0, y0, x1, y1) per character])."""
    length = length or int(rng.integers(4, 7))
    text = "".join(rng.choice(list(ALPHABET), length))
    font_path = fonts()[rng.integers(len(fonts()))]
    font = ImageFont.truetype(font_path, int(rng.integers(30, 44)))
    glyphs = [_glyph(c, font, tuple(int(v) for v in rng.integers(0, 140, 3)),
                     float(rng.uniform(-25, 25))) for c in text]
    gap = int(rng.integers(-2, 8))
    width = sum(g.width for g in glyphs) + gap * (length - 1) + int(rng.integers(12, 40))
    height = max(g.height for g in glyphs) + int(rng.integers(6, 24))
    image = _background(rng, width, height)
    boxes, x = [], int(rng.integers(4, 12))
    for glyph in glyphs:
        y = int(rng.integers(0, height - glyph.height + 1))
        image.paste(glyph, (x, y), glyph)
        boxes.append(_ink_box(glyph, x, y))
        x += glyph.width + gap
    _noise(rng, ImageDraw.Draw(image), width, height)
    return image, text, boxes


def _ink_box(glyph: Image.Image, x: int, y: int) -> tuple:
    """The box of the drawn pixels of a glyph pasted at (x, y)."""
    x0, y0, x1, y1 = glyph.getchannel("A").getbbox()
    return (x + x0, y + y0, x + x1, y + y1)


def render_click(rng, size: tuple = (344, 344), count: int | None = None):
    """A click-captcha ("click the characters in order"): 3 to 5 large characters
    scattered over a real photo. Returns (RGB PIL image, text, boxes)."""
    width, height = size
    name = BACKGROUND_PHOTOS[rng.integers(len(BACKGROUND_PHOTOS))]
    window = crop(photo(name), *rng.uniform(0.3, 0.7, 2), *rng.uniform(0.4, 0.9, 2))
    image = Image.fromarray(window).resize(size, Image.BILINEAR)
    count = count or int(rng.integers(3, 6))
    text = "".join(rng.choice(list(ALPHABET), count))
    font = ImageFont.truetype(fonts()[rng.integers(len(fonts()))], int(rng.integers(28, 42)))
    boxes = []
    for char in text:
        glyph = _glyph(char, font, tuple(int(v) for v in rng.integers(0, 256, 3)),
                       float(rng.uniform(-35, 35)))
        for _ in range(50):  # a free place: characters of a click-captcha do not overlap
            x = int(rng.integers(0, width - glyph.width))
            y = int(rng.integers(0, height - glyph.height))
            box = _ink_box(glyph, x, y)
            if all(_apart(box, other) for other in boxes):
                break
        image.paste(glyph, (x, y), glyph)
        boxes.append(box)
    return image, text, boxes


def _apart(a: tuple, b: tuple, margin: int = 4) -> bool:
    return a[2] + margin <= b[0] or b[2] + margin <= a[0] or \
        a[3] + margin <= b[1] or b[3] + margin <= a[1]
