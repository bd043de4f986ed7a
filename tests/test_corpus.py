"""Corpus location, download (against a local HTTP server) and reading of zips and text files."""

from __future__ import annotations

import hashlib
import http.server
import io
import socket
import threading
import zipfile
from pathlib import Path

import pytest

from attn_mt.data import corpus
from attn_mt.data.corpus import download_corpus, read_pairs, resolve_corpus
from attn_mt.errors import UserError

PAYLOAD = b"Go.\tVa !\nHi.\tSalut !\n" * 500  # 10,500 bytes


class _Handler(http.server.BaseHTTPRequestHandler):
    """/ok serves PAYLOAD, /cut promises all of it but sends half, anything else is 404."""

    requests: list[str] = []

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        type(self).requests.append(self.path)
        if self.path not in ("/ok", "/cut"):
            self.send_error(404, "Not Found")
            return
        self.send_response(200)
        self.send_header("Content-Length", str(len(PAYLOAD)))
        self.end_headers()
        body = PAYLOAD if self.path == "/ok" else PAYLOAD[: len(PAYLOAD) // 2]
        self.wfile.write(body)
        self.wfile.flush()
        self.close_connection = True

    def log_message(self, *args) -> None:
        """Keep the test output quiet."""


@pytest.fixture
def server():
    """A local HTTP server on 127.0.0.1; yields its base URL."""
    _Handler.requests = []
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()
    thread.join()


@pytest.fixture
def isolated(monkeypatch, tmp_path):
    """No $ATTN_MT_DATA and a private cache folder."""
    monkeypatch.delenv("ATTN_MT_DATA", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    return tmp_path


SHA_OK = hashlib.sha1(PAYLOAD).hexdigest()


def _leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir()) if folder.exists() else []


# ----- download -----


def test_download_checksum_ok(server, tmp_path):
    dest = tmp_path / "c" / "fra-eng.zip"
    assert download_corpus(f"{server}/ok", dest, SHA_OK, progress=False) == dest
    assert dest.read_bytes() == PAYLOAD
    assert _leftovers(dest.parent) == ["fra-eng.zip"]


def test_download_checksum_mismatch_names_both_hashes_and_saves_nothing(server, tmp_path):
    dest = tmp_path / "fra-eng.zip"
    wrong = "0" * 40
    with pytest.raises(UserError) as err:
        download_corpus(f"{server}/ok", dest, wrong, progress=False)
    assert wrong in str(err.value) and SHA_OK in str(err.value)
    assert _leftovers(tmp_path) == []


def test_download_cut_off_midway_is_not_a_cache_hit(server, isolated, monkeypatch):
    monkeypatch.setattr(corpus, "CORPUS_URL", f"{server}/cut")
    monkeypatch.setattr(corpus, "CORPUS_SHA1", SHA_OK)
    with pytest.raises(UserError, match=r"cut off after 5250 of 10500 bytes"):
        resolve_corpus()
    cache = isolated / "cache" / "attn-mt"
    assert _leftovers(cache) == []
    with pytest.raises(UserError, match="no corpus found"):
        resolve_corpus(download=False)


def test_download_http_error_and_refused_connection(server, tmp_path):
    with pytest.raises(UserError, match="HTTP 404"):
        download_corpus(f"{server}/missing", tmp_path / "x.zip", SHA_OK, progress=False)
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with pytest.raises(UserError, match=rf"cannot download http://127.0.0.1:{port}/ok"):
        download_corpus(f"http://127.0.0.1:{port}/ok", tmp_path / "x.zip", SHA_OK, progress=False)
    assert _leftovers(tmp_path) == []


def test_resolve_downloads_once_into_the_cache(server, isolated, monkeypatch):
    monkeypatch.setattr(corpus, "CORPUS_URL", f"{server}/ok")
    monkeypatch.setattr(corpus, "CORPUS_SHA1", SHA_OK)
    first = resolve_corpus()
    assert first == isolated / "cache" / "attn-mt" / "fra-eng.zip"
    assert resolve_corpus() == first
    assert _Handler.requests == ["/ok"]


# ----- resolution order -----


def test_resolution_order_explicit_env_cache(isolated, monkeypatch):
    explicit, env = isolated / "a.txt", isolated / "b.txt"
    explicit.write_text("x\ty\n")
    env.write_text("x\ty\n")
    cached = corpus.cache_path()
    cached.parent.mkdir(parents=True)
    cached.write_bytes(b"cached")
    monkeypatch.setenv("ATTN_MT_DATA", str(env))
    assert resolve_corpus(explicit) == explicit
    assert resolve_corpus(None) == env
    monkeypatch.delenv("ATTN_MT_DATA")
    assert resolve_corpus(None, download=False) == cached


def test_missing_explicit_or_env_path_is_an_error_not_a_fallthrough(isolated, monkeypatch):
    cached = corpus.cache_path()
    cached.parent.mkdir(parents=True)
    cached.write_bytes(b"cached")
    with pytest.raises(UserError, match=r"corpus file not found: .*nope\.zip"):
        resolve_corpus(isolated / "nope.zip")
    monkeypatch.setenv("ATTN_MT_DATA", str(isolated / "gone.txt"))
    with pytest.raises(UserError, match=r"gone\.txt \(from \$ATTN_MT_DATA\)"):
        resolve_corpus()
    with pytest.raises(UserError, match="not a file"):
        resolve_corpus(isolated)


def test_cache_path_default_and_xdg(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert corpus.cache_path() == tmp_path / "attn-mt" / "fra-eng.zip"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert corpus.cache_path() == tmp_path / "home" / ".cache" / "attn-mt" / "fra-eng.zip"


# ----- reading -----


def _zip(path: Path, members: dict[str, bytes]) -> Path:
    with zipfile.ZipFile(path, "w") as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return path


def test_text_file_two_and_three_columns(tmp_path):
    two = tmp_path / "two.txt"
    two.write_text("Go.\tVa !\nHi.\tSalut !\n", encoding="utf-8")
    assert read_pairs(two) == [("Go.", "Va !"), ("Hi.", "Salut !")]
    three = tmp_path / "three.txt"
    three.write_text(
        "Go.\tVa !\tCC-BY 2.0 (France) Attribution: tatoeba.org #2877272\r\nHi.\tSalut !\tCC-BY 2.0\r\n",
        encoding="utf-8-sig",
    )
    assert read_pairs(three) == [("Go.", "Va !"), ("Hi.", "Salut !")]


def test_zip_like_the_books_with_macos_junk(tmp_path):
    path = _zip(
        tmp_path / "fra-eng.zip",
        {
            "__MACOSX/fra-eng/._fra.txt": b"\x00\x05\x16\x07 resource fork",
            "fra-eng/_about.txt": b"about",
            "fra-eng/fra.txt": "Go.\tVa !\nWow!\tÇa alors\u202f!\n".encode(),
        },
    )
    assert read_pairs(path) == [("Go.", "Va !"), ("Wow!", "Ça alors\u202f!")]


def test_zip_falls_back_to_the_single_safe_txt_member(tmp_path):
    path = _zip(tmp_path / "mine.zip", {"__MACOSX/._pairs.txt": b"\xff\xfe", "data/pairs.txt": b"a\tb\n"})
    assert read_pairs(path) == [("a", "b")]


def test_zip_with_traversal_members_is_never_read(tmp_path):
    evil = _zip(tmp_path / "evil.zip", {"../fra.txt": b"evil\tmal\n", "/etc/fra.txt": b"abs\tabs\n"})
    with pytest.raises(UserError) as err:
        read_pairs(evil)
    assert "no fra-eng/fra.txt member" in str(err.value) and "../fra.txt" in str(err.value)
    mixed = _zip(
        tmp_path / "mixed.zip", {"../../fra-eng/fra.txt": b"evil\tmal\n", "fra-eng/fra.txt": b"go\tva\n"}
    )
    assert read_pairs(mixed) == [("go", "va")]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["evil.zip", "mixed.zip"]


def test_zip_without_the_member_or_with_two_candidates(tmp_path):
    with pytest.raises(UserError, match=r"no fra-eng/fra\.txt member \(it holds readme\.md\)"):
        read_pairs(_zip(tmp_path / "a.zip", {"readme.md": b"hi"}))
    with pytest.raises(UserError, match="several text members"):
        read_pairs(_zip(tmp_path / "b.zip", {"x.txt": b"a\tb\n", "y.txt": b"c\td\n"}))


def test_not_a_zip(tmp_path):
    path = tmp_path / "fra-eng.zip"
    path.write_text("Go.\tVa !\n")
    with pytest.raises(UserError, match=r"fra-eng\.zip is not a zip archive"):
        read_pairs(path)


def test_malformed_line_is_reported_with_its_number(tmp_path):
    path = tmp_path / "bad.txt"
    path.write_text("Go.\tVa !\nHi.\tSalut !\nno tab here\nRun!\tCours !\n", encoding="utf-8")
    with pytest.raises(UserError, match=r"bad\.txt: line 3 has 1 tab-separated field\(s\)"):
        read_pairs(path)
    path.write_text("Go.\tVa !\n\t\tSalut\tx\n", encoding="utf-8")
    with pytest.raises(UserError, match="line 2 has 4 tab-separated"):
        read_pairs(path)
    path.write_text("Go.\tVa !\nHi.\t \n", encoding="utf-8")
    with pytest.raises(UserError, match="line 2 has an empty French sentence"):
        read_pairs(path)


def test_bytes_that_are_not_utf8_name_the_line(tmp_path):
    path = tmp_path / "latin1.txt"
    text = "Go.\tVa !\nHi.\tSalut !\nHe's calm.\tIl est calme.\nWow!\tÇa alors !\n"
    path.write_bytes(text.encode("latin-1"))
    expected = r"latin1\.txt: line 4 is not valid UTF-8 \(byte 0xc7 at byte column 6\)"
    with pytest.raises(UserError, match=expected):
        read_pairs(path)
    inside = _zip(tmp_path / "l.zip", {"fra-eng/fra.txt": "a\tb\nc\tç\n".encode("latin-1")})
    with pytest.raises(UserError, match=r"l\.zip:fra-eng/fra\.txt: line 2 is not valid UTF-8"):
        read_pairs(inside)


def test_empty_corpus(tmp_path):
    empty = tmp_path / "empty.txt"
    empty.write_bytes(b"")
    with pytest.raises(UserError, match=r"empty\.txt: the corpus is empty"):
        read_pairs(empty)
    blank = tmp_path / "blank.txt"
    blank.write_text("\n\n  \n")
    with pytest.raises(UserError, match="the corpus is empty"):
        read_pairs(blank)
    with pytest.raises(UserError, match=r"fra\.txt: the corpus is empty"):
        read_pairs(_zip(tmp_path / "e.zip", {"fra-eng/fra.txt": b""}))


def _patch_headers(path: Path, *, flags: int = 0, method: int | None = None) -> Path:
    """Set flag bits and/or the compression method in a one-member zip's local and central headers."""
    data = bytearray(path.read_bytes())
    for signature, flags_at in ((b"PK\x03\x04", 6), (b"PK\x01\x02", 8)):
        at = data.index(signature) + flags_at
        data[at] |= flags
        if method is not None:
            data[at + 2 : at + 4] = method.to_bytes(2, "little")
    path.write_bytes(bytes(data))
    return path


def test_encrypted_or_unreadable_compression_is_a_user_error(tmp_path):
    encrypted = _patch_headers(_zip(tmp_path / "e.zip", {"fra-eng/fra.txt": b"go\tva\n"}), flags=0x1)
    with pytest.raises(UserError, match=r"e\.zip: fra-eng/fra\.txt is encrypted"):
        read_pairs(encrypted)
    deflate64 = _patch_headers(_zip(tmp_path / "d.zip", {"fra-eng/fra.txt": b"go\tva\n"}), method=9)
    with pytest.raises(UserError, match=r"d\.zip: cannot read fra-eng/fra\.txt: .*re-zip it"):
        read_pairs(deflate64)


def test_damaged_zip(tmp_path):
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("fra-eng/fra.txt", "".join(f"s{i * 7919 % 100003}\tt{i}\n" for i in range(3000)))
    data = bytearray(buffer.getvalue())
    assert len(data) > 8000
    data[100:2000] = bytes(1900)  # wipe part of the compressed stream; the central directory survives
    path = tmp_path / "broken.zip"
    path.write_bytes(bytes(data))
    with pytest.raises(UserError, match=r"broken\.zip: damaged zip archive"):
        read_pairs(path)


@pytest.mark.corpus
def test_real_corpus_lines_and_first_pairs(corpus_path):
    pairs = read_pairs(corpus_path)
    assert len(pairs) == 167_130
    assert pairs[:3] == [("Go.", "Va !"), ("Hi.", "Salut !"), ("Run!", "Cours\u202f!")]


def test_data_report_names_the_corpus_by_absolute_path(tmp_path, monkeypatch):
    from support.synthetic import write_corpus

    from attn_mt.config import load_config
    from attn_mt.data.dataset import load_data

    write_corpus(tmp_path / "reverse.txt", n=50)
    monkeypatch.chdir(tmp_path)
    cfg = load_config(None, ["data.num_examples=40"])
    report = load_data(cfg.data, "reverse.txt").report
    assert report["corpus"] == str(tmp_path.resolve() / "reverse.txt")
