"""tests/audio: the folder's tier marker, registered here until pyproject.toml's list names it
(the top-level conftest marks every test with its folder)."""


def pytest_configure(config):
    config.addinivalue_line("markers", "audio: tests/audio")
