/* One-line logging to stderr: "LEVEL module message", after its UTC time
 * ("2026-12-07T06:45:37.255Z ") when stderr is a terminal (the journal stamps lines itself). */
#ifndef SV_UTIL_LOG_H
#define SV_UTIL_LOG_H

enum sv_log_level { SV_LOG_ERROR = 0, SV_LOG_WARN, SV_LOG_INFO, SV_LOG_DEBUG, SV_LOG_TRACE };

/** Current threshold; lines above it are skipped before their arguments are evaluated. */
extern int sv_log_threshold;

/**
 * Write one log line to stderr.
 * @param level  an sv_log_level
 * @param module target such as "sv.ss" or "ag.node" (borrowed)
 * @param fmt    printf format; the line ends with a newline added here
 * Thread-safe: the line is formatted into a local buffer and written with one write(2).
 */
void sv_log_write(int level, const char *module, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/**
 * Parse a level name ("error", "warn", "info", "debug", "trace").
 * @return the level, or -1 for an unknown name.
 */
int sv_log_level_parse(const char *name);

#define SV_LOG(level, module, ...)                                                                 \
    do {                                                                                           \
        if ((level) <= sv_log_threshold)                                                           \
            sv_log_write((level), (module), __VA_ARGS__);                                          \
    } while (0)

#endif
