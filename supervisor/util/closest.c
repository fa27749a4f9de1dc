/* The closest known word to a mistyped one (closest.h). */
#include "supervisor/util/closest.h"

#include <string.h>

static char fold(char c)
{
    if (c >= 'A' && c <= 'Z')
        return (char)(c - 'A' + 'a');
    return c == '-' ? '_' : c;
}

/* Optimal string alignment distance of a (la chars) and b (lb chars), both <= SV_CLOSEST_MAX. */
static size_t distance(const char *a, size_t la, const char *b, size_t lb)
{
    size_t row[3][SV_CLOSEST_MAX + 1]; /* rows i-2, i-1, i, by i % 3 */
    for (size_t j = 0; j <= lb; j++)
        row[0][j] = j;
    for (size_t i = 1; i <= la; i++) {
        size_t *cur = row[i % 3], *prev = row[(i - 1) % 3], *prev2 = row[(i + 1) % 3];
        cur[0] = i;
        for (size_t j = 1; j <= lb; j++) {
            size_t cost = fold(a[i - 1]) == fold(b[j - 1]) ? 0 : 1;
            size_t d = prev[j] + 1;
            if (cur[j - 1] + 1 < d)
                d = cur[j - 1] + 1;
            if (prev[j - 1] + cost < d)
                d = prev[j - 1] + cost;
            if (i > 1 && j > 1 && fold(a[i - 1]) == fold(b[j - 2]) &&
                fold(a[i - 2]) == fold(b[j - 1]) && prev2[j - 2] + 1 < d)
                d = prev2[j - 2] + 1;
            cur[j] = d;
        }
    }
    return row[la % 3][lb];
}

const char *sv_closest(const char *word, const char *const *cands, size_t n)
{
    if (word == NULL)
        return NULL;
    size_t lw = strlen(word);
    if (lw == 0 || lw > SV_CLOSEST_MAX)
        return NULL;
    size_t limit = lw <= 4 ? 1 : lw <= 8 ? 2 : 3;
    const char *best = NULL;
    size_t best_d = limit + 1;
    for (size_t k = 0; k < n; k++) {
        if (cands[k] == NULL)
            continue;
        size_t lc = strlen(cands[k]);
        if (lc > SV_CLOSEST_MAX || (lc > lw ? lc - lw : lw - lc) > limit)
            continue;
        size_t d = distance(word, lw, cands[k], lc);
        if (d < best_d) {
            best_d = d;
            best = cands[k];
        }
    }
    return best;
}
