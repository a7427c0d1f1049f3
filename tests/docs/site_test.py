"""The manual builds into an HTML site in MkDocs's strict mode, as //docs:site builds it: an
index.html and one HTML page per entry of the navigation; a broken link, an anchor no heading
has, or a page left out of the navigation fails the build with MkDocs's own message."""

import os
import shutil

import yaml
from absl.testing import absltest

from docs import build_site

DOCS = os.path.dirname(os.path.abspath(build_site.__file__))


def navigation(config_file):
    """The HTML pages the navigation of `config_file` names, in order."""
    with open(config_file, encoding="utf-8") as handle:
        return build_site.nav_pages(yaml.safe_load(handle)["nav"])


class SiteTest(absltest.TestCase):

    def build(self, config_file=build_site.CONFIG):
        """Builds the site of `config_file` into a fresh folder; returns (folder, pages)."""
        output_dir = os.path.join(self.create_tempdir().full_path, "site")
        return output_dir, build_site.build_site(output_dir, config_file)

    def copy_of_the_manual(self):
        """A writable copy of docs/ (pages, screenshots, config); returns its config file."""
        copy = os.path.join(self.create_tempdir().full_path, "docs")
        shutil.copytree(DOCS, copy, ignore=shutil.ignore_patterns("*.py", "BUILD", "__*"))
        return os.path.join(copy, "config", "mkdocs.yml")

    def test_the_manual_builds_strictly_into_a_page_per_navigation_entry(self):
        try:
            output_dir, pages = self.build()
        except build_site.SiteError as error:
            self.fail(str(error))
        self.assertEqual(pages, navigation(build_site.CONFIG))
        self.assertIn("index.html", pages)
        for page in pages:
            with self.subTest(page=page):
                self.assertTrue(os.path.isfile(os.path.join(output_dir, page)))
        sources = sorted(name[:-3] + ".html" for name in os.listdir(DOCS) if name.endswith(".md"))
        self.assertEqual(sorted(pages), sources, "every page of docs/ in the navigation, once")
        for screenshot in ("tensorboard_confusion_matrix.png", "tensorboard_custom_scalars.png",
                           "tensorboard_profile.png"):
            with self.subTest(screenshot=screenshot):
                self.assertTrue(os.path.isfile(os.path.join(output_dir, screenshot)))

    def test_the_site_loads_nothing_from_elsewhere(self):
        output_dir, pages = self.build()
        for page in pages:
            with open(os.path.join(output_dir, page), encoding="utf-8") as handle:
                text = handle.read()
            with self.subTest(page=page):
                self.assertNotIn("fonts.googleapis", text)
                self.assertNotIn("<script src=\"http", text)
                self.assertNotIn("<link rel=\"stylesheet\" href=\"http", text)

    def assert_build_fails(self, page, mode, text, expected):
        """Writes `text` to `page` of a copy of the manual (`mode` "a" appends, "w" makes a new
        page); the strict build must fail with `expected` in MkDocs's message."""
        config_file = self.copy_of_the_manual()
        with open(os.path.join(os.path.dirname(config_file), "..", page), mode,
                  encoding="utf-8") as handle:
            handle.write(text)
        with self.assertRaisesRegex(build_site.SiteError, expected):
            self.build(config_file)

    def test_a_broken_link_fails_the_build_with_mkdocs_message(self):
        self.assert_build_fails("faults.md", "a", "\nSee [the old page](no_such_page.md).\n",
                                "no_such_page.md")

    def test_an_anchor_no_heading_has_fails_the_build(self):
        self.assert_build_fails("speed.md", "a",
                                "\nSee [profiling](monitoring.md#no-such-heading).\n",
                                "no-such-heading")

    def test_a_page_missing_from_the_navigation_fails_the_build(self):
        self.assert_build_fails("orphan.md", "w", "# A page nobody lists\n", "orphan.md")


if __name__ == "__main__":
    absltest.main()
