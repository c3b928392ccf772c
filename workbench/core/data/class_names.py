"""Class names shared by the built-in datasets and the readers of users' files."""

FASHION_CLASSES = ["T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
                   "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot"]
DIGIT_CLASSES = [str(i) for i in range(10)]


def class_index_text(names, limit: int | None = None) -> str:
    """Each class index with its name, "0 cat · 1 dog · 2 fox": which number means which class, the
    thing a model and a dataset must agree on. With `limit`, the first `limit` and how many more."""
    names = list(names)
    shown = names if limit is None or len(names) <= limit else names[:limit]
    text = " · ".join(f"{i} {name}" for i, name in enumerate(shown))
    return text + (f" · … {len(names) - len(shown)} more" if len(shown) < len(names) else "")
