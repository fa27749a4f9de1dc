/*
 * bulk: loopback load tools for tests/bench/bench.sh (not part of katana).
 *
 *   bulk sink PORT            accept connections on 127.0.0.1:PORT, read and discard;
 *                             when a connection that carried data closes, or once it
 *                             has been silent for a second, print "BYTES SECONDS" (first
 *                             byte to last byte) on stdout, once per connection (some
 *                             servers keep the destination open after the client's close).
 *                             Keeps every other connection open (idle ones too).
 *   bulk send PORT SECONDS [FIRST]
 *                             connect to 127.0.0.1:PORT, write 256 KiB blocks for SECONDS,
 *                             close; print the bytes written. With FIRST, the first FIRST
 *                             bytes (at most 256 KiB) go alone, 50 ms before the blocks.
 *   bulk hold PORT N [DEST]   open N connections to 127.0.0.1:PORT, write one byte on each,
 *                             print "ready N" and keep them open until stdin closes. With
 *                             DEST, PORT is a SOCKS5 server (no auth): each connection first
 *                             asks it to CONNECT to 127.0.0.1:DEST.
 *   bulk relay PORT TO        accept connections on 127.0.0.1:PORT one at a time and copy each
 *                             one way to a new connection to 127.0.0.1:TO: level-triggered
 *                             epoll, reads of 256 KiB, TCP_NODELAY, nothing else (the floor a
 *                             relay's kernel time cannot go below, ssrelay-bench.sh).
 *   bulk splice PORT          a SOCKS5 relay on 127.0.0.1:PORT (no auth, CONNECT to an IPv4
 *                             address, always dialled on 127.0.0.1) that moves bytes with
 *                             splice(2) alone through a 1 MiB pipe, one blocking thread per
 *                             direction: what the kernel charges for a relay that only splices
 *                             (peers-bench.sh's Vision floor).
 *
 * Loopback only by construction (the address is fixed).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <netinet/in.h>
#include <fcntl.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define BLOCK (256 * 1024)
#define MAX_FDS 200000

struct conn_stat {
    unsigned long long bytes;
    double first, last;
    int reported;
};

#define QUIET_SECONDS 1.0

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static struct sockaddr_in loopback(int port)
{
    struct sockaddr_in sa;
    memset(&sa, 0, sizeof(sa));
    sa.sin_family = AF_INET;
    sa.sin_port = htons((unsigned short)port);
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    return sa;
}

static int dial(int port)
{
    struct sockaddr_in sa = loopback(port);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0)
        return -1;
    if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
        close(fd);
        return -1;
    }
    return fd;
}

/* Accept one pending connection: 1 accepted (or dropped), 0 none pending, -1 error. */
static int sink_accept(int lfd, int ep, struct conn_stat *st)
{
    int fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK);
    if (fd < 0)
        return errno == EAGAIN || errno == EINTR ? 0 : -1;
    if (fd >= MAX_FDS) {
        close(fd);
        return 1;
    }
    struct epoll_event ev = {.events = EPOLLIN, .data.fd = fd};
    st[fd].bytes = 0;
    st[fd].first = 0;
    st[fd].reported = 0;
    if (epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev) < 0) {
        close(fd);
        return -1;
    }
    return 1;
}

/* Print "BYTES SECONDS" for a connection that carried bulk data, once. */
static void sink_report(int fd, struct conn_stat *st)
{
    if (st[fd].bytes > 1 && !st[fd].reported) {
        printf("%llu %.6f\n", st[fd].bytes, st[fd].last - st[fd].first);
        fflush(stdout);
        st[fd].reported = 1;
    }
}

static void sink_read(int fd, struct conn_stat *st, char *buf)
{
    for (;;) {
        ssize_t n = read(fd, buf, BLOCK);
        if (n > 0) {
            st[fd].last = now();
            if (st[fd].bytes == 0)
                st[fd].first = st[fd].last;
            st[fd].bytes += (unsigned long long)n;
            continue;
        }
        if (n < 0 && (errno == EAGAIN || errno == EINTR))
            return;
        /* EOF or error: report a connection that carried bulk data */
        sink_report(fd, st);
        st[fd].bytes = 0;
        close(fd);
        return;
    }
}

static int run_sink(int port)
{
    struct sockaddr_in sa = loopback(port);
    int one = 1, lfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(lfd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(lfd, 4096) < 0) {
        perror("bulk sink: bind/listen");
        return 1;
    }
    int ep = epoll_create1(0);
    struct epoll_event ev = {.events = EPOLLIN, .data.fd = lfd}, evs[256];
    epoll_ctl(ep, EPOLL_CTL_ADD, lfd, &ev);
    struct conn_stat *st = calloc(MAX_FDS, sizeof(*st));
    char *buf = malloc(BLOCK);
    if (!st || !buf)
        return 1;
    int max_fd = lfd;
    for (;;) {
        int n = epoll_wait(ep, evs, 256, 250);
        for (int i = 0; i < n; i++) {
            if (evs[i].data.fd == lfd) {
                while (sink_accept(lfd, ep, st) > 0)
                    ;
            } else {
                if (evs[i].data.fd > max_fd)
                    max_fd = evs[i].data.fd;
                sink_read(evs[i].data.fd, st, buf);
            }
        }
        double t = now();
        for (int fd = lfd + 1; fd <= max_fd; fd++)
            if (st[fd].bytes > 1 && t - st[fd].last >= QUIET_SECONDS)
                sink_report(fd, st);
    }
}

static int run_send(int port, double seconds, size_t first)
{
    int fd = dial(port);
    if (fd < 0) {
        perror("bulk send: connect");
        return 1;
    }
    char *buf = malloc(BLOCK);
    if (!buf)
        return 1;
    for (size_t i = 0; i < BLOCK; i++)
        buf[i] = (char)(i * 131 + 7);
    unsigned long long total = 0;
    if (first > 0) {
        ssize_t n = write(fd, buf, first < BLOCK ? first : BLOCK);
        if (n > 0)
            total += (unsigned long long)n;
        usleep(50000);
    }
    double end = now() + seconds;
    while (now() < end) {
        ssize_t n = write(fd, buf, BLOCK);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            perror("bulk send: write");
            break;
        }
        total += (unsigned long long)n;
    }
    close(fd);
    printf("%llu\n", total);
    free(buf);
    return 0;
}

/* Read exactly @p n bytes from the blocking @p fd. @return 0, or -1 (EOF or an error). */
static int read_exact(int fd, unsigned char *buf, size_t n)
{
    for (size_t got = 0; got < n;) {
        ssize_t r = read(fd, buf + got, n - got);
        if (r <= 0)
            return -1;
        got += (size_t)r;
    }
    return 0;
}

/* SOCKS5 (RFC 1928), no authentication: ask the server on @p fd to CONNECT to 127.0.0.1:@p
 * dest. @return 0 once it answered success, -1 otherwise. */
static int socks_connect(int fd, int dest)
{
    unsigned char hello[3] = {5, 1, 0}, req[10] = {5, 1, 0, 1, 127, 0, 0, 1,
                                                    (unsigned char)(dest >> 8),
                                                    (unsigned char)dest};
    unsigned char ans[10];
    if (write(fd, hello, sizeof hello) != (ssize_t)sizeof hello || read_exact(fd, ans, 2) < 0 ||
        ans[0] != 5 || ans[1] != 0)
        return -1;
    /* the answer to an IPv4 request carries an IPv4 bound address: 10 bytes */
    if (write(fd, req, sizeof req) != (ssize_t)sizeof req || read_exact(fd, ans, 10) < 0 ||
        ans[1] != 0)
        return -1;
    return 0;
}

static int run_hold(int port, int count, int socks_dest)
{
    int opened = 0;
    for (int i = 0; i < count; i++) {
        int fd = dial(port);
        if (fd >= 0 && socks_dest > 0 && socks_connect(fd, socks_dest) < 0) {
            close(fd);
            fd = -1;
            errno = EPROTO;
        }
        if (fd < 0) {
            fprintf(stderr, "bulk hold: connection %d: %s\n", i, strerror(errno));
            break;
        }
        if (write(fd, "x", 1) != 1) {
            close(fd);
            break;
        }
        opened++;
    }
    printf("ready %d\n", opened);
    fflush(stdout);
    char c;
    while (read(0, &c, 1) > 0)
        ;
    return opened == count ? 0 : 1;
}

/* Copy @p from to @p to until EOF or an error; @p to is a blocking socket. */
static void relay_one(int from, int to, char *buf)
{
    int ep = epoll_create1(0), one = 1;
    struct epoll_event ev = {.events = EPOLLIN, .data.fd = from};
    setsockopt(from, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    setsockopt(to, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    if (ep < 0 || epoll_ctl(ep, EPOLL_CTL_ADD, from, &ev) < 0)
        goto out;
    for (;;) {
        if (epoll_wait(ep, &ev, 1, -1) < 0 && errno != EINTR)
            break;
        ssize_t n = read(from, buf, BLOCK);
        if (n < 0 && (errno == EAGAIN || errno == EINTR))
            continue;
        if (n <= 0)
            break;
        for (ssize_t off = 0, w; off < n; off += w)
            if ((w = write(to, buf + off, (size_t)(n - off))) < 0)
                goto out;
    }
out:
    if (ep >= 0)
        close(ep);
}

static int run_relay(int port, int to_port)
{
    struct sockaddr_in sa = loopback(port);
    int one = 1, lfd = socket(AF_INET, SOCK_STREAM, 0);
    setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    char *buf = malloc(BLOCK);
    if (buf == NULL || bind(lfd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(lfd, 16) < 0) {
        perror("bulk relay: bind/listen");
        return 1;
    }
    for (;;) {
        int fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK);
        if (fd < 0 && (errno == EINTR || errno == ECONNABORTED))
            continue;
        if (fd < 0) {
            perror("bulk relay: accept");
            return 1;
        }
        int to = dial(to_port);
        if (to >= 0) {
            relay_one(fd, to, buf);
            close(to);
        }
        close(fd);
    }
}

struct splice_dir {
    int from, to;
};

/* One direction of a spliced connection: socket to pipe to socket until EOF, then pass the
 * EOF on. */
static void *splice_dir_run(void *arg)
{
    struct splice_dir *d = arg;
    int pipefd[2];
    if (pipe(pipefd) < 0)
        return NULL;
    (void)fcntl(pipefd[1], F_SETPIPE_SZ, 1 << 20);
    for (;;) {
        ssize_t n = splice(d->from, NULL, pipefd[1], NULL, 1 << 20, SPLICE_F_MOVE | SPLICE_F_MORE);
        if (n <= 0)
            break;
        while (n > 0) {
            ssize_t m = splice(pipefd[0], NULL, d->to, NULL, (size_t)n, SPLICE_F_MOVE | SPLICE_F_MORE);
            if (m <= 0)
                goto out;
            n -= m;
        }
    }
out:
    shutdown(d->to, SHUT_WR);
    close(pipefd[0]);
    close(pipefd[1]);
    return NULL;
}

/* One SOCKS5 client: the handshake, the dial, then both directions spliced. */
static void *splice_conn(void *arg)
{
    int fd = (int)(intptr_t)arg, to = -1;
    unsigned char req[10], ok[10] = {5, 0, 0, 1, 127, 0, 0, 1, 0, 0};
    if (read_exact(fd, req, 3) < 0 || write(fd, "\x05\x00", 2) != 2 ||
        read_exact(fd, req, 10) < 0 || req[1] != 1 || req[3] != 1 ||
        (to = dial(req[8] << 8 | req[9])) < 0 || write(fd, ok, sizeof ok) != (ssize_t)sizeof ok)
        goto out;
    struct splice_dir up = {fd, to}, down = {to, fd};
    pthread_t t;
    if (pthread_create(&t, NULL, splice_dir_run, &up) != 0)
        goto out;
    splice_dir_run(&down);
    pthread_join(t, NULL);
out:
    if (to >= 0)
        close(to);
    close(fd);
    return NULL;
}

static int run_splice(int port)
{
    struct sockaddr_in sa = loopback(port);
    int one = 1, lfd = socket(AF_INET, SOCK_STREAM, 0);
    setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(lfd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(lfd, 64) < 0) {
        perror("bulk splice: bind/listen");
        return 1;
    }
    for (;;) {
        int fd = accept(lfd, NULL, NULL);
        if (fd < 0 && (errno == EINTR || errno == ECONNABORTED))
            continue;
        if (fd < 0) {
            perror("bulk splice: accept");
            return 1;
        }
        pthread_t t;
        if (pthread_create(&t, NULL, splice_conn, (void *)(intptr_t)fd) != 0)
            close(fd);
        else
            pthread_detach(t);
    }
}

int main(int argc, char **argv)
{
    if (argc == 3 && strcmp(argv[1], "sink") == 0)
        return run_sink(atoi(argv[2]));
    if ((argc == 4 || argc == 5) && strcmp(argv[1], "send") == 0)
        return run_send(atoi(argv[2]), atof(argv[3]), argc == 5 ? (size_t)atol(argv[4]) : 0);
    if ((argc == 4 || argc == 5) && strcmp(argv[1], "hold") == 0)
        return run_hold(atoi(argv[2]), atoi(argv[3]), argc == 5 ? atoi(argv[4]) : 0);
    if (argc == 4 && strcmp(argv[1], "relay") == 0)
        return run_relay(atoi(argv[2]), atoi(argv[3]));
    if (argc == 3 && strcmp(argv[1], "splice") == 0)
        return run_splice(atoi(argv[2]));
    fprintf(stderr, "usage: bulk sink PORT | bulk send PORT SECONDS [FIRST] | bulk hold PORT N [DEST] | "
                    "bulk relay PORT TO | bulk splice PORT\n");
    return 2;
}
