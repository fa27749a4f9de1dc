/*
 * bulkcheck: large seeded transfers for the integration tests (issue 24: no transfer through
 * a multiplexed path is cut while both ends are alive). Not part of katana; loopback only.
 *
 *   bulkcheck serve READY_FILE
 *       Listen on 127.0.0.1 (a port the kernel picks, written to READY_FILE once listening) and
 *       serve each connection in a thread of its own. A connection opens with one line,
 *       "KTBULK up|down BYTES SEED\n":
 *         up    read exactly BYTES bytes and compare them with the seeded pattern as they
 *               come, then answer "OK BYTES\n" (every byte arrived, identical), or
 *               "BAD OFFSET\n" at the first byte that differs; a connection that ends before
 *               BYTES gets no answer (its client sees the cut as it is);
 *         down  send BYTES bytes of the pattern as fast as the socket takes them, then wait for
 *               the client's close.
 *   bulkcheck up|down SOCKS_PORT DEST_PORT BYTES SEED TIMEOUT_S
 *       Through the SOCKS5 server on 127.0.0.1:SOCKS_PORT (no authentication), CONNECT to
 *       127.0.0.1:DEST_PORT (a bulkcheck serve), ask for that transfer and move it at full
 *       speed: up sends BYTES bytes and waits for the far end's count; down reads BYTES bytes,
 *       comparing each with the pattern. Prints one line (the bytes, the seconds, MB/s, and
 *       where and why a failed transfer stopped). Exit 0 only when the far end counted exactly
 *       BYTES identical bytes (up) or exactly BYTES identical bytes arrived (down); 1 for a cut,
 *       a difference or TIMEOUT_S passed (a stall); 2 for bad arguments.
 *
 * The pattern: byte i of a transfer is byte i % 8 (little-endian) of splitmix64's output for
 * the seed's FNV-1a hash plus (i / 8 + 1) times the golden gamma.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define BLOCK (256 * 1024)
#define LINE_MAX_LEN 200

/* ---- the pattern ---------------------------------------------------------------------------- */

static uint64_t seed_hash(const char *seed)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (const char *p = seed; *p != '\0'; p++) {
        h ^= (uint8_t)*p;
        h *= 0x100000001b3ull;
    }
    return h;
}

static uint64_t pattern_word(uint64_t key, uint64_t k)
{
    uint64_t z = key + (k + 1) * 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Bytes [off, off + len) of the pattern of @p key into @p out. */
static void pattern_fill(uint64_t key, uint64_t off, uint8_t *out, size_t len)
{
    size_t i = 0;
    while (i < len) {
        uint64_t w = pattern_word(key, (off + i) / 8);
        unsigned b = (unsigned)((off + i) % 8);
        if (b == 0 && len - i >= 8) {
            for (unsigned j = 0; j < 8; j++)
                out[i + j] = (uint8_t)(w >> (8 * j));
            i += 8;
            continue;
        }
        out[i++] = (uint8_t)(w >> (8 * b));
    }
}

/* The offset of the first byte of @p got (@p len bytes at pattern offset @p off) that differs
 * from the pattern, or -1 when none does. @p want is scratch of @p len bytes. */
static int64_t pattern_check(uint64_t key, uint64_t off, const uint8_t *got, uint8_t *want,
                             size_t len)
{
    pattern_fill(key, off, want, len);
    if (memcmp(got, want, len) == 0)
        return -1;
    size_t i = 0;
    while (got[i] == want[i])
        i++;
    return (int64_t)(off + i);
}

/* ---- sockets -------------------------------------------------------------------------------- */

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static struct sockaddr_in loopback(int port)
{
    struct sockaddr_in sa;
    memset(&sa, 0, sizeof sa);
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    sa.sin_port = htons((uint16_t)port);
    return sa;
}

/* Write all @p len bytes. @return 0, or -errno (0 bytes taken: -EPIPE). */
static int write_all(int fd, const void *p, size_t len)
{
    const uint8_t *b = p;
    while (len > 0) {
        ssize_t n = send(fd, b, len, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return n < 0 ? -errno : -EPIPE;
        b += n;
        len -= (size_t)n;
    }
    return 0;
}

/* Read exactly @p len bytes. @return 0, -EPIPE at EOF before them, or -errno. */
static int read_exact(int fd, void *p, size_t len)
{
    uint8_t *b = p;
    while (len > 0) {
        ssize_t n = recv(fd, b, len, 0);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return n < 0 ? -errno : -EPIPE;
        b += n;
        len -= (size_t)n;
    }
    return 0;
}

/* One line of at most LINE_MAX_LEN - 1 bytes, read a byte at a time (nothing after it is
 * consumed), without its newline. @return 0 or -errno / -EPIPE / -EPROTO (too long). */
static int read_line(int fd, char *line)
{
    for (size_t n = 0; n + 1 < LINE_MAX_LEN; n++) {
        int rc = read_exact(fd, line + n, 1);
        if (rc != 0)
            return rc;
        if (line[n] == '\n') {
            line[n] = '\0';
            return 0;
        }
    }
    return -EPROTO;
}

static const char *err_text(int rc) { return rc == -EPIPE ? "end of stream" : strerror(-rc); }

/* ---- the server ----------------------------------------------------------------------------- */

/* up: read and check @p bytes bytes, answer the count. */
static void serve_up(int fd, uint64_t bytes, uint64_t key, uint8_t *buf, uint8_t *want)
{
    uint64_t got = 0;
    char answer[64];
    while (got < bytes) {
        size_t want_n = bytes - got < BLOCK ? (size_t)(bytes - got) : BLOCK;
        ssize_t n = recv(fd, buf, want_n, 0);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            fprintf(stderr, "bulkcheck serve: up cut at %" PRIu64 " of %" PRIu64 " bytes: %s\n",
                    got, bytes, n < 0 ? strerror(errno) : "end of stream");
            return;
        }
        int64_t bad = pattern_check(key, got, buf, want, (size_t)n);
        if (bad >= 0) {
            snprintf(answer, sizeof answer, "BAD %" PRId64 "\n", bad);
            (void)write_all(fd, answer, strlen(answer));
            return;
        }
        got += (uint64_t)n;
    }
    snprintf(answer, sizeof answer, "OK %" PRIu64 "\n", got);
    (void)write_all(fd, answer, strlen(answer));
}

/* down: send @p bytes bytes of the pattern, then wait for the client's close. */
static void serve_down(int fd, uint64_t bytes, uint64_t key, uint8_t *buf)
{
    for (uint64_t sent = 0; sent < bytes;) {
        size_t n = bytes - sent < BLOCK ? (size_t)(bytes - sent) : BLOCK;
        pattern_fill(key, sent, buf, n);
        int rc = write_all(fd, buf, n);
        if (rc != 0) {
            fprintf(stderr, "bulkcheck serve: down cut at %" PRIu64 " of %" PRIu64 " bytes: %s\n",
                    sent, bytes, err_text(rc));
            return;
        }
        sent += n;
    }
    while (recv(fd, buf, BLOCK, 0) > 0)
        ;
}

static void *serve_conn(void *arg)
{
    int fd = (int)(intptr_t)arg;
    char line[LINE_MAX_LEN], op[8], seed[LINE_MAX_LEN];
    uint64_t bytes = 0;
    uint8_t *buf = malloc(BLOCK), *want = malloc(BLOCK);
    if (buf != NULL && want != NULL && read_line(fd, line) == 0 &&
        sscanf(line, "KTBULK %7s %" SCNu64 " %199s", op, &bytes, seed) == 3) {
        if (strcmp(op, "up") == 0)
            serve_up(fd, bytes, seed_hash(seed), buf, want);
        else if (strcmp(op, "down") == 0)
            serve_down(fd, bytes, seed_hash(seed), buf);
    }
    free(buf);
    free(want);
    close(fd);
    return NULL;
}

static int cmd_serve(const char *ready_file)
{
    int ls = socket(AF_INET, SOCK_STREAM, 0), one = 1;
    struct sockaddr_in sa = loopback(0);
    socklen_t sl = sizeof sa;
    setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (ls < 0 || bind(ls, (struct sockaddr *)&sa, sizeof sa) != 0 || listen(ls, 64) != 0 ||
        getsockname(ls, (struct sockaddr *)&sa, &sl) != 0) {
        perror("bulkcheck serve: listen");
        return 1;
    }
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp", ready_file);
    FILE *f = fopen(tmp, "w");
    if (f == NULL || fprintf(f, "%d\n", ntohs(sa.sin_port)) < 0 || fclose(f) != 0 ||
        rename(tmp, ready_file) != 0) {
        perror("bulkcheck serve: ready file");
        return 1;
    }
    for (;;) {
        int fd = accept(ls, NULL, NULL);
        if (fd < 0) {
            if (errno == EINTR || errno == ECONNABORTED || errno == EMFILE)
                continue;
            perror("bulkcheck serve: accept");
            return 1;
        }
        pthread_t th;
        if (pthread_create(&th, NULL, serve_conn, (void *)(intptr_t)fd) != 0)
            close(fd);
        else
            pthread_detach(th);
    }
}

/* ---- the client ----------------------------------------------------------------------------- */

/* Progress, for the line a timeout prints from its signal handler. */
static volatile uint64_t g_moved;
static char g_timeout_line[256];

static void on_alarm(int sig)
{
    (void)sig;
    char line[320];
    int n = snprintf(line, sizeof line, "%s after %" PRIu64 " bytes\n", g_timeout_line,
                     (uint64_t)g_moved);
    if (n > 0)
        (void)!write(1, line, (size_t)n);
    _exit(1);
}

/* A SOCKS5 CONNECT to 127.0.0.1:@p dest through 127.0.0.1:@p socks_port. @return the socket
 * or -1 (the reason printed). */
static int socks_connect(int socks_port, int dest)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = loopback(socks_port);
    if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0) {
        printf("connect to the SOCKS5 server on %d: %s\n", socks_port, strerror(errno));
        return -1;
    }
    uint8_t hello[3] = {5, 1, 0}, choice[2], req[10] = {5, 1, 0, 1, 127, 0, 0, 1};
    req[8] = (uint8_t)(dest >> 8);
    req[9] = (uint8_t)dest;
    uint8_t rep[4 + 255 + 2];
    int rc = write_all(fd, hello, sizeof hello);
    if (rc == 0)
        rc = read_exact(fd, choice, 2);
    if (rc == 0 && (choice[0] != 5 || choice[1] != 0))
        rc = -EPROTO;
    if (rc == 0)
        rc = write_all(fd, req, sizeof req);
    if (rc == 0)
        rc = read_exact(fd, rep, 4);
    if (rc == 0 && (rep[0] != 5 || rep[1] != 0))
        rc = -ECONNREFUSED;
    if (rc == 0) { /* the bound address: IPv4, a name, or IPv6, then the port */
        size_t alen = rep[3] == 1 ? 4 : rep[3] == 4 ? 16 : 0;
        if (rep[3] == 3)
            rc = read_exact(fd, rep + 4, 1), alen = 1 + (size_t)rep[4];
        if (rc == 0)
            rc = read_exact(fd, rep + 4, alen + 2);
    }
    if (rc != 0) {
        printf("SOCKS5 CONNECT through %d: %s\n", socks_port, err_text(rc));
        close(fd);
        return -1;
    }
    return fd;
}

/* up: send @p bytes, then read the far end's count. @return the exit status. */
static int client_up(int fd, uint64_t bytes, uint64_t key, const char *label, double t0)
{
    uint8_t *buf = malloc(BLOCK);
    if (buf == NULL)
        return 1;
    for (uint64_t sent = 0; sent < bytes;) {
        size_t n = bytes - sent < BLOCK ? (size_t)(bytes - sent) : BLOCK;
        pattern_fill(key, sent, buf, n);
        int rc = write_all(fd, buf, n);
        if (rc != 0) {
            printf("%s: CUT: sent %" PRIu64 " of %" PRIu64 " bytes in %.2fs: %s\n", label, sent,
                   bytes, now_s() - t0, err_text(rc));
            free(buf);
            return 1;
        }
        sent += n;
        g_moved = sent;
    }
    free(buf);
    char line[LINE_MAX_LEN];
    int rc = read_line(fd, line);
    double secs = now_s() - t0;
    char want[64];
    snprintf(want, sizeof want, "OK %" PRIu64, bytes);
    if (rc != 0 || strcmp(line, want) != 0) {
        printf("%s: CUT or DIFFERENT: sent %" PRIu64 " bytes in %.2fs, the far end said %s\n",
               label, bytes, secs, rc != 0 ? err_text(rc) : line);
        return 1;
    }
    printf("%s: %" PRIu64 " bytes up in %.2fs (%.0f MB/s), the far end counted them all, "
           "identical\n", label, bytes, secs, (double)bytes / secs / 1e6);
    return 0;
}

/* down: read @p bytes and check them. @return the exit status. */
static int client_down(int fd, uint64_t bytes, uint64_t key, const char *label, double t0)
{
    uint8_t *buf = malloc(BLOCK), *want = malloc(BLOCK);
    uint64_t got = 0;
    int status = 0;
    while (buf != NULL && want != NULL && got < bytes) {
        size_t want_n = bytes - got < BLOCK ? (size_t)(bytes - got) : BLOCK;
        ssize_t n = recv(fd, buf, want_n, 0);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            printf("%s: CUT: %" PRIu64 " of %" PRIu64 " bytes arrived in %.2fs: %s\n", label, got,
                   bytes, now_s() - t0, n < 0 ? strerror(errno) : "end of stream");
            status = 1;
            break;
        }
        int64_t bad = pattern_check(key, got, buf, want, (size_t)n);
        if (bad >= 0) {
            printf("%s: DIFFERENT at byte %" PRId64 "\n", label, bad);
            status = 1;
            break;
        }
        got += (uint64_t)n;
        g_moved = got;
    }
    if (buf == NULL || want == NULL)
        status = 1;
    else if (status == 0)
        printf("%s: %" PRIu64 " bytes down in %.2fs (%.0f MB/s), all of them, identical\n",
               label, bytes, now_s() - t0, (double)bytes / (now_s() - t0) / 1e6);
    free(buf);
    free(want);
    return status;
}

static int cmd_client(const char *op, int socks_port, int dest, uint64_t bytes, const char *seed,
                      unsigned timeout_s)
{
    char label[LINE_MAX_LEN + 16];
    snprintf(label, sizeof label, "%s %s", op, seed);
    snprintf(g_timeout_line, sizeof g_timeout_line, "%.200s: STALLED: %us passed", label,
             timeout_s);
    signal(SIGALRM, on_alarm);
    alarm(timeout_s);
    double t0 = now_s();
    int fd = socks_connect(socks_port, dest);
    if (fd < 0)
        return 1;
    char head[LINE_MAX_LEN + 64];
    int n = snprintf(head, sizeof head, "KTBULK %s %" PRIu64 " %s\n", op, bytes, seed);
    int rc = write_all(fd, head, (size_t)n);
    if (rc != 0) {
        printf("%s: the request: %s\n", label, err_text(rc));
        close(fd);
        return 1;
    }
    uint64_t key = seed_hash(seed);
    int status = strcmp(op, "up") == 0 ? client_up(fd, bytes, key, label, t0)
                                       : client_down(fd, bytes, key, label, t0);
    close(fd);
    return status;
}

int main(int argc, char **argv)
{
    if (argc == 3 && strcmp(argv[1], "serve") == 0)
        return cmd_serve(argv[2]);
    if (argc == 7 && (strcmp(argv[1], "up") == 0 || strcmp(argv[1], "down") == 0) &&
        strlen(argv[5]) < LINE_MAX_LEN - 40 && strchr(argv[5], ' ') == NULL) {
        char *end;
        uint64_t bytes = strtoull(argv[4], &end, 10);
        if (*end == '\0' && bytes > 0)
            return cmd_client(argv[1], atoi(argv[2]), atoi(argv[3]), bytes, argv[5],
                              (unsigned)atoi(argv[6]));
    }
    fprintf(stderr, "usage: bulkcheck serve READY_FILE\n"
                    "       bulkcheck up|down SOCKS_PORT DEST_PORT BYTES SEED TIMEOUT_S\n");
    return 2;
}
