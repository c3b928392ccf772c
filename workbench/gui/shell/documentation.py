"""Help → Documentation: the workbench's own pages (README.md, docs/, docs/methods/, plugins/README.md),
read from the installed package or the source checkout and shown in the window, so they work offline.

A list of pages on the left, the page as rendered Markdown on the right. Links between pages are
followed in the window (relative to the page they are on, with `#section` anchors); Back and
Forward go through the pages seen; a link to the web opens in the system's browser.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from PySide6.QtCore import Qt, QUrl
from PySide6.QtGui import QDesktopServices, QImageReader, QTextCursor
from PySide6.QtWidgets import (
    QHBoxLayout,
    QLabel,
    QSplitter,
    QTextBrowser,
    QToolButton,
    QTreeWidget,
    QTreeWidgetItem,
    QVBoxLayout,
    QWidget,
)

from workbench.core.resources import documentation_dir

IMAGE_WIDTH = 720  # screenshots are drawn at most this wide
PAGE_ROLE = Qt.ItemDataRole.UserRole


@dataclass(frozen=True)
class Page:
    path: str  # relative to the documentation folder, with forward slashes: "docs/methods/idc.md"
    title: str
    parent: str | None = None  # the page it is listed under


def page_title(file: Path) -> str:
    """The page's first heading, or its file name."""
    try:
        for line in file.read_text(encoding="utf-8").splitlines():
            if line.startswith("# "):
                return line[2:].strip()
    except (OSError, UnicodeDecodeError):
        pass
    return file.stem


def documentation_pages(root: Path) -> list[Page]:
    """README first, then docs/*.md, the methods (docs/methods/README.md with its pages under it),
    and the plugin guide, where each exists."""
    pages = []
    if (root / "README.md").is_file():
        pages.append(Page("README.md", page_title(root / "README.md")))
    for file in sorted((root / "docs").glob("*.md")):
        pages.append(Page(f"docs/{file.name}", page_title(file)))
    methods = root / "docs" / "methods"
    index = "docs/methods/README.md" if (methods / "README.md").is_file() else None
    if index:
        pages.append(Page(index, page_title(methods / "README.md")))
    for file in sorted(methods.glob("*.md")):
        if file.name != "README.md":
            pages.append(Page(f"docs/methods/{file.name}", page_title(file), index))
    if (root / "plugins" / "README.md").is_file():
        pages.append(Page("plugins/README.md", page_title(root / "plugins" / "README.md")))
    return pages


def slug(text: str) -> str:
    """A heading's anchor as GitHub makes it: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[^\w\- ]", "", text.strip().lower())
    return text.replace(" ", "-")


class DocumentationWindow(QWidget):
    """The documentation in a window of its own: `show_page("docs/methods/idc.md")`, `follow(url)`."""

    def __init__(self, root: Path | None = None, parent: QWidget | None = None):
        super().__init__(parent, Qt.WindowType.Window)
        self.setObjectName("documentationWindow")
        self.setWindowTitle("Documentation — DL Testing Workbench")
        self.root = root if root is not None else documentation_dir()
        self.pages = documentation_pages(self.root) if self.root is not None else []
        self.current: str | None = None
        self.history: list[tuple[str, str]] = []  # (page, anchor) seen, and where we are in it
        self.position = -1

        self.tree = QTreeWidget()
        self.tree.setObjectName("documentationPages")
        self.tree.setHeaderHidden(True)
        self.tree.setRootIsDecorated(False)
        self.tree.setIndentation(14)
        self.items: dict[str, QTreeWidgetItem] = {}
        for page in self.pages:
            above = self.items.get(page.parent) if page.parent else None
            item = QTreeWidgetItem([page.title])
            item.setData(0, PAGE_ROLE, page.path)
            item.setToolTip(0, f"{page.title} ({page.path})")
            if above is not None:
                above.addChild(item)
            else:
                self.tree.addTopLevelItem(item)
            self.items[page.path] = item
        self.tree.expandAll()
        self.tree.currentItemChanged.connect(self._on_item)

        self.browser = QTextBrowser()
        self.browser.setObjectName("documentationText")
        self.browser.setOpenLinks(False)  # links are followed here, between pages
        self.browser.anchorClicked.connect(self.follow)
        self.browser.document().setDocumentMargin(18)
        self.back_button = self._tool_button("Back", "Go back to the page seen before", lambda: self.go(-1))
        self.forward_button = self._tool_button("Forward", "Go forward again", lambda: self.go(1))
        self.location = QLabel()
        self.location.setObjectName("documentationLocation")
        self.location.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        bar = QHBoxLayout()
        bar.setContentsMargins(0, 0, 0, 0)
        bar.addWidget(self.back_button)
        bar.addWidget(self.forward_button)
        bar.addSpacing(8)
        bar.addWidget(self.location, 1)
        right = QWidget()
        right_layout = QVBoxLayout(right)
        right_layout.setContentsMargins(0, 0, 0, 0)
        right_layout.addLayout(bar)
        right_layout.addWidget(self.browser, 1)
        split = QSplitter()
        split.addWidget(self.tree)
        split.addWidget(right)
        split.setStretchFactor(1, 1)
        side = min(400, max(240, self.tree.sizeHintForColumn(0) + 24))  # every title whole, if it can
        split.setSizes([side, 1180 - side])
        layout = QVBoxLayout(self)
        layout.setContentsMargins(6, 6, 6, 6)
        layout.addWidget(split)
        self.resize(1180, 780)
        if self.pages:
            self.show_page(self.pages[0].path)
        else:
            self.browser.setMarkdown("# No documentation found\n\nThe pages (README.md and docs/) are neither in "
                                     "the installed package nor beside it. Reinstall the workbench, or read them "
                                     "in its source repository.")
        self._update_buttons()

    @staticmethod
    def _tool_button(text: str, tip: str, slot) -> QToolButton:
        button = QToolButton()
        button.setText(text)
        button.setToolTip(tip)
        button.clicked.connect(slot)
        return button

    # --- showing pages ---------------------------------------------------------------------------

    def show_page(self, path: str, anchor: str = "", remember: bool = True) -> bool:
        """Show the page `path` (relative to the documentation folder), at `anchor` if given."""
        if path not in self.items or self.root is None:
            return False
        if path != self.current:
            file = self.root / path
            try:
                text = file.read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError) as exc:
                text = f"# {path}\n\nThis page could not be read: {exc}."
            document = self.browser.document()
            document.setBaseUrl(QUrl.fromLocalFile(str(file.parent) + "/"))  # images beside the page
            self.browser.setMarkdown(text)
            self._fit_images()
            self.current = path
            item = self.items[path]
            if self.tree.currentItem() is not item:
                self.tree.blockSignals(True)
                self.tree.setCurrentItem(item)
                self.tree.blockSignals(False)
        self.location.setText(path + (f"#{anchor}" if anchor else ""))
        if anchor:
            self.scroll_to(anchor)
        else:
            self.browser.verticalScrollBar().setValue(0)
        if remember:
            del self.history[self.position + 1:]
            self.history.append((path, anchor))
            self.position = len(self.history) - 1
        self._update_buttons()
        return True

    def _fit_images(self) -> None:
        """Draw wide images (the README's screenshots) at most `IMAGE_WIDTH` wide, keeping their shape."""
        document = self.browser.document()
        images = []
        block = document.begin()
        while block.isValid():
            it = block.begin()
            while not it.atEnd():
                fragment = it.fragment()
                if fragment.charFormat().isImageFormat():
                    table = QTextCursor(block).currentTable()  # images side by side share the width
                    width = IMAGE_WIDTH // table.columns() - 12 if table is not None else IMAGE_WIDTH
                    images.append((fragment.position(), fragment.length(), fragment.charFormat().toImageFormat(),
                                   width))
                it += 1
            block = block.next()
        for position, length, image, width in images:
            url = document.baseUrl().resolved(QUrl(image.name()))
            size = QImageReader(url.toLocalFile()).size() if url.isLocalFile() else None
            if size is None or not size.isValid() or size.width() <= width:
                continue
            image.setWidth(width)
            image.setHeight(size.height() * width / size.width())
            cursor = QTextCursor(document)
            cursor.setPosition(position)
            cursor.setPosition(position + length, QTextCursor.MoveMode.KeepAnchor)
            cursor.setCharFormat(image)

    def scroll_to(self, anchor: str) -> bool:
        """Scroll to the heading whose anchor is `anchor` (as GitHub names them)."""
        block = self.browser.document().begin()
        while block.isValid():
            if block.blockFormat().headingLevel() and slug(block.text()) == anchor:
                cursor = QTextCursor(block)
                self.browser.setTextCursor(cursor)
                bar = self.browser.verticalScrollBar()
                top = self.browser.document().documentLayout().blockBoundingRect(block).top()
                bar.setValue(int(top))
                return True
            block = block.next()
        return False

    def _on_item(self, item: QTreeWidgetItem | None, _previous=None) -> None:
        if item is not None:
            self.show_page(item.data(0, PAGE_ROLE))

    # --- links and history -----------------------------------------------------------------------

    def resolve(self, url: QUrl) -> tuple[str | None, str]:
        """(page, anchor) a link on the current page leads to; page None when it is not one of the pages."""
        anchor = url.fragment()
        if url.scheme() in ("http", "https", "mailto"):
            return None, anchor
        target = url.path() if not url.isLocalFile() else url.toLocalFile()
        if not target:  # "#section" on this page
            return self.current, anchor
        here = (self.root / (self.current or "README.md")).parent
        file = Path(target) if Path(target).is_absolute() else here / target
        if file.is_dir():
            file = file / "README.md"
        try:
            relative = file.resolve().relative_to(self.root.resolve()).as_posix()
        except ValueError:
            return None, anchor
        return (relative if relative in self.items else None), anchor

    def follow(self, url: QUrl) -> None:
        """A clicked link: another page (or a place on this one) here, the web in the browser."""
        if url.scheme() in ("http", "https", "mailto"):
            QDesktopServices.openUrl(url)
            return
        if self.root is None:
            return
        page, anchor = self.resolve(url)
        if page is None:
            self.location.setText(f"{url.toString()} is not one of these pages")
            return
        self.show_page(page, anchor)

    def go(self, step: int) -> None:
        position = self.position + step
        if 0 <= position < len(self.history):
            self.position = position
            page, anchor = self.history[position]
            self.show_page(page, anchor, remember=False)

    def _update_buttons(self) -> None:
        self.back_button.setEnabled(self.position > 0)
        self.forward_button.setEnabled(0 <= self.position < len(self.history) - 1)

    def titles(self) -> list[str]:
        """Every listed page's title, in the list's order."""
        return [page.title for page in self.pages]
