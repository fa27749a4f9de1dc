/*
 * The closest known word to a mistyped one, for errors that say what the user meant: an unknown
 * command ("chek": did you mean "check"?) or an unknown configuration key ("shortid": did you
 * mean "short_id"?). Pure: no allocation, no I/O.
 */
#ifndef SV_UTIL_CLOSEST_H
#define SV_UTIL_CLOSEST_H

#include <stddef.h>

/** Longest word sv_closest() compares; longer words and candidates never match. */
#define SV_CLOSEST_MAX 64

/**
 * The candidate nearest to @p word by edit distance (insertions, deletions, substitutions and
 * swaps of two neighbours, each 1; letters compared without case, '-' and '_' alike), if it is
 * near enough to be a typo: at most 1 for a word of up to 4 characters, 2 up to 8, 3 beyond.
 * @param word   NUL-terminated; NULL gives NULL
 * @param cands  @p n NUL-terminated words (NULL entries are skipped), borrowed
 * @return a pointer into @p cands (the first of equally near ones), or NULL when none is near
 *         enough or @p word equals none but is longer than SV_CLOSEST_MAX.
 */
const char *sv_closest(const char *word, const char *const *cands, size_t n);

#endif
