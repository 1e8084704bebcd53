"""Scripts that copier's `_migrations` run inside a generated package during `copier update`.

Each script is stdlib-only and runnable as a file path
(`{{ _copier_python }} {{ _copier_conf.src_path }}/scaffold/migrations/<name>.py ...`), so a
plain `copier update --trust` works without ascend-scaffold installed in copier's Python.
"""
