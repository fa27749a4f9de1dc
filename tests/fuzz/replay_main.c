/*
 * Corpus replayer for fuzz harnesses built without libFuzzer (STYLE.md §11, Knot's pattern):
 * runs LLVMFuzzerTestOneInput over every file of the directories (or files) given as arguments.
 * Without arguments it replays $FUZZ_CORPUS, else <srcdir>/tests/fuzz/<program name>.in, where
 * <srcdir> is $KATANA_TOP_SRCDIR (set by `make check`) or the compiled-in TOP_SRCDIR.
 * Exit status: 0 when at least one input ran (a crash or failed check aborts), 1 otherwise.
 */
#include "config.h"

#include <dirent.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "tests/fuzz/fuzz.h"

#ifndef TOP_SRCDIR
#define TOP_SRCDIR "."
#endif

#define REPLAY_INPUT_MAX (1u << 20) /* bigger corpus files are refused */

static int replay_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        perror(path);
        return -1;
    }
    uint8_t *buf = malloc(REPLAY_INPUT_MAX);
    size_t n = buf != NULL ? fread(buf, 1, REPLAY_INPUT_MAX, f) : 0;
    int bad = buf == NULL || ferror(f) || !feof(f);
    fclose(f);
    if (bad) {
        fprintf(stderr, "%s: unreadable or larger than %u bytes\n", path, REPLAY_INPUT_MAX);
        free(buf);
        return -1;
    }
    /* Hand the harness an exact-size copy so ASan sees reads past the end. */
    uint8_t *exact = malloc(n ? n : 1);
    if (exact == NULL) {
        free(buf);
        return -1;
    }
    memcpy(exact, buf, n);
    free(buf);
    LLVMFuzzerTestOneInput(exact, n);
    free(exact);
    return 1;
}

/* @return inputs replayed, or -1 on an error. */
static int replay_path(const char *path)
{
    struct stat st;
    if (stat(path, &st) != 0) {
        perror(path);
        return -1;
    }
    if (!S_ISDIR(st.st_mode))
        return replay_file(path);
    DIR *d = opendir(path);
    if (d == NULL) {
        perror(path);
        return -1;
    }
    int count = 0;
    struct dirent *e;
    while (count >= 0 && (e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.')
            continue;
        char full[PATH_MAX];
        snprintf(full, sizeof full, "%s/%s", path, e->d_name);
        int r = replay_file(full);
        count = r < 0 ? -1 : count + r;
    }
    closedir(d);
    return count;
}

int main(int argc, char **argv)
{
    int total = 0;
    if (argc > 1) {
        for (int i = 1; i < argc && total >= 0; i++) {
            int r = replay_path(argv[i]);
            total = r < 0 ? -1 : total + r;
        }
    } else {
        char dir[PATH_MAX];
        const char *env = getenv("FUZZ_CORPUS");
        const char *top = getenv("KATANA_TOP_SRCDIR");
        const char *name = strrchr(argv[0], '/');
        name = name != NULL ? name + 1 : argv[0];
        if (env != NULL)
            snprintf(dir, sizeof dir, "%s", env);
        else
            snprintf(dir, sizeof dir, "%s/tests/fuzz/%s.in", top ? top : TOP_SRCDIR, name);
        total = replay_path(dir);
        fprintf(stderr, "%s: replayed %d inputs from %s\n", name, total, dir);
    }
    return total > 0 ? 0 : 1;
}
