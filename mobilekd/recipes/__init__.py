"""The programs users run, one file each, on top of the library (`mobilekd/` outside this folder, `android_bench/`,
`teacher_ib_bert/`). `mobilekd <verb>` (mobilekd/cli.py) and scripts/*.sh call them; nothing in the library
imports them."""
