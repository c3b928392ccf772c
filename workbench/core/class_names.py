"""Class names shared by the built-in datasets and the readers of users' files."""

FASHION_CLASSES = ["T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
                   "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot"]
DIGIT_CLASSES = [str(i) for i in range(10)]
