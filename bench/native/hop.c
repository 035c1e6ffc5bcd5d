/*
 * bench/native/hop.c: a compiled prototype of confine's per-call file mediation,
 * to measure the floor a compiled hot path would have on this host (issue 26,
 * "one hop fewer": +40 us per mediated file call). Not part of confine, and
 * not a sandbox: it times the mechanism, it protects nothing beyond the
 * protected-name check of `hop1steps`.
 *
 *     hop MODE N        (run from a directory the account may write)
 *
 * MODE:
 *   bare       the calls unmediated (no filter);
 *   hop1       the agent child installs a seccomp filter whose listener the
 *              supervisor (the parent) owns: it receives each notification,
 *              reads the path from the agent's memory, checks the notification
 *              is still valid, performs the call itself relative to the agent's
 *              cwd and answers (ADDFD + SEND for an open, SEND otherwise);
 *   hop2       the same, but the supervisor hands each call to a broker process
 *              over a SOCK_SEQPACKET socketpair (the directory fd by SCM_RIGHTS),
 *              the broker performs it and sends the fd back (confine's path
 *              before issue 26's one hop);
 *   hop1steps  hop1 plus what confine's broker does per call that a compiled
 *              one would still do: a pidfd and a fresh descriptor of the
 *              agent's cwd per call, and the name checked against a short list
 *              of protected names (refused with EPERM).
 *
 * Output: one JSON line per kind of call, {"mode", "kind", "n", "us_per_op",
 * "mediated", "notifs"}: "mediated" is how many calls of one op the filter
 * notifies, "notifs" how many notifications the supervisor handled during the
 * n timed ops (so a test can see the calls really went through the listener).
 * Then one line {"mode", "kind": "probe", "protected_mkdir", "plain_mkdir"}:
 * the result of mkdir(".vscode") and mkdir("plain") (refused only in hop1steps).
 *
 * The kinds match bench/file_mediation.py's rows so the figures line up.
 * Build: cc -O2 -Wall -Wextra -Werror -o hop hop.c (bench/native_hop.py does).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <poll.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#if defined(__x86_64__)
#define ARCH_NR AUDIT_ARCH_X86_64
#elif defined(__aarch64__)
#define ARCH_NR AUDIT_ARCH_AARCH64
#else
#error "hop.c knows x86_64 and aarch64 only"
#endif

enum mode { BARE, HOP1, HOP2, HOP1STEPS };
static const char *const MODE_NAMES[] = {"bare", "hop1", "hop2", "hop1steps"};
static enum mode g_mode;

/* The supervisor's count of handled notifications, in memory shared with the
 * agent so the agent can report it per kind (it reads it after its call
 * returned, and the supervisor counts before it answers). */
static unsigned long *g_handled;

static void die(const char *what)
{
    fprintf(stderr, "hop: %s: %s\n", what, strerror(errno));
    exit(2);
}

/* ---- the filter --------------------------------------------------------- */

/* Linux 6.6's synchronous wake-up, absent from older headers (Debian 12's are 6.1). */
#ifndef SECCOMP_IOCTL_NOTIF_SET_FLAGS
#define SECCOMP_IOCTL_NOTIF_SET_FLAGS SECCOMP_IOW(4, __u64)
#endif
#ifndef SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP
#define SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP (1UL << 0)
#endif

#define LOAD_NR BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr))
#define LOAD_ARG_LO(i) BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, args[i]))
#define NOTIFY BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_USER_NOTIF)
#define ALLOW BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW)

/* What is notified, like confine: an open that may write or create, mkdir,
 * unlink and rmdir (bench/file_mediation.py counts each as one mediated call);
 * everything else, read-only opens included, runs unmediated. */
#define WRITE_FLAGS (O_WRONLY | O_RDWR | O_CREAT | O_TRUNC)

static int install_filter(void)
{
    struct sock_filter f[] = {
        /* A foreign ABI would bring other syscall numbers: fail closed. */
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, ARCH_NR, 1, 0),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS),
        LOAD_NR,
#if defined(__x86_64__)
        /* x32 calls share the arch value: refuse them (they are never ours). */
        BPF_JUMP(BPF_JMP | BPF_JGE | BPF_K, 0x40000000, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | ENOSYS),
        /* open(path, flags): flags in args[1] */
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_open, 0, 4),
        LOAD_ARG_LO(1),
        BPF_JUMP(BPF_JMP | BPF_JSET | BPF_K, WRITE_FLAGS, 0, 1),
        NOTIFY,
        ALLOW,
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_creat, 0, 1),
        NOTIFY,
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_mkdir, 0, 1),
        NOTIFY,
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_unlink, 0, 1),
        NOTIFY,
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_rmdir, 0, 1),
        NOTIFY,
#endif
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_mkdirat, 0, 1),
        NOTIFY,
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_unlinkat, 0, 1),
        NOTIFY,
        /* openat(dirfd, path, flags): flags in args[2] */
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_openat, 0, 3),
        LOAD_ARG_LO(2),
        BPF_JUMP(BPF_JMP | BPF_JSET | BPF_K, WRITE_FLAGS, 0, 1),
        NOTIFY,
        /* openat2 carries its flags in memory the filter cannot read: an
         * open that may write would escape the check, so it is refused. */
        LOAD_NR,
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_openat2, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | ENOSYS),
        ALLOW,
    };
    struct sock_fprog prog = {.len = sizeof(f) / sizeof(f[0]), .filter = f};
    /* Without no_new_privs an unprivileged process may not install a filter
     * (it could otherwise confuse a setuid program it execs). */
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0))
        die("PR_SET_NO_NEW_PRIVS");
    int fd = (int)syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_NEW_LISTENER, &prog);
    if (fd < 0)
        die("seccomp(SECCOMP_FILTER_FLAG_NEW_LISTENER)");
    return fd;
}

/* ---- fd passing --------------------------------------------------------- */

/* One message with a byte buffer and at most one fd (-1: none). */
static int send_fd(int sock, const void *buf, size_t len, int fd)
{
    struct iovec iov = {.iov_base = (void *)buf, .iov_len = len};
    union {
        char b[CMSG_SPACE(sizeof(int))];
        struct cmsghdr align;
    } u;
    struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1};
    if (fd >= 0) {
        m.msg_control = u.b;
        m.msg_controllen = sizeof(u.b);
        struct cmsghdr *c = CMSG_FIRSTHDR(&m);
        c->cmsg_level = SOL_SOCKET;
        c->cmsg_type = SCM_RIGHTS;
        c->cmsg_len = CMSG_LEN(sizeof(int));
        memcpy(CMSG_DATA(c), &fd, sizeof(int));
    }
    return sendmsg(sock, &m, MSG_NOSIGNAL) < 0 ? -1 : 0;
}

/* Returns the bytes read (0 at EOF, -1 on error); *fd the fd received or -1. */
static ssize_t recv_fd(int sock, void *buf, size_t len, int *fd)
{
    struct iovec iov = {.iov_base = buf, .iov_len = len};
    union {
        char b[CMSG_SPACE(sizeof(int))];
        struct cmsghdr align;
    } u;
    struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.b, .msg_controllen = sizeof(u.b)};
    *fd = -1;
    ssize_t r = recvmsg(sock, &m, MSG_CMSG_CLOEXEC);
    if (r < 0)
        return -1;
    struct cmsghdr *c = CMSG_FIRSTHDR(&m);
    if (c && c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS)
        memcpy(fd, CMSG_DATA(c), sizeof(int));
    return r;
}

/* ---- one mediated call ---------------------------------------------------- */

enum op { OP_OPEN, OP_MKDIR, OP_UNLINK };

struct call {
    enum op op;
    int dirfd_arg;   /* the agent's dirfd argument, or AT_FDCWD */
    int flags;       /* open flags, or unlinkat's AT_REMOVEDIR */
    mode_t mode;
    char path[PATH_MAX];
};

/* Decode the notified syscall into a call; the path address in *addr. */
static int decode(const struct seccomp_notif *req, struct call *c, uint64_t *addr)
{
    const __u64 *a = req->data.args;
    c->dirfd_arg = AT_FDCWD;
    c->flags = 0;
    c->mode = 0;
    switch (req->data.nr) {
#if defined(__x86_64__)
    case __NR_open: c->op = OP_OPEN; *addr = a[0]; c->flags = (int)a[1]; c->mode = (mode_t)a[2]; return 0;
    case __NR_creat:
        c->op = OP_OPEN; *addr = a[0]; c->flags = O_CREAT | O_WRONLY | O_TRUNC; c->mode = (mode_t)a[1]; return 0;
    case __NR_mkdir: c->op = OP_MKDIR; *addr = a[0]; c->mode = (mode_t)a[1]; return 0;
    case __NR_unlink: c->op = OP_UNLINK; *addr = a[0]; return 0;
    case __NR_rmdir: c->op = OP_UNLINK; *addr = a[0]; c->flags = AT_REMOVEDIR; return 0;
#endif
    case __NR_openat:
        c->op = OP_OPEN; c->dirfd_arg = (int)a[0]; *addr = a[1]; c->flags = (int)a[2]; c->mode = (mode_t)a[3];
        return 0;
    case __NR_mkdirat: c->op = OP_MKDIR; c->dirfd_arg = (int)a[0]; *addr = a[1]; c->mode = (mode_t)a[2]; return 0;
    case __NR_unlinkat: c->op = OP_UNLINK; c->dirfd_arg = (int)a[0]; *addr = a[1]; c->flags = (int)a[2]; return 0;
    }
    return -1;
}

/* Copy the NUL-terminated path from the agent's memory. process_vm_readv
 * stops at the first unreadable page, so read up to each page end rather
 * than PATH_MAX at once (a short path near the end of a mapping is common).
 * 4096 divides every page size Linux uses, so no chunk crosses a page. */
static int read_path(pid_t pid, uint64_t addr, char *out)
{
    size_t got = 0, page = 4096;
    while (got < PATH_MAX) {
        size_t want = page - ((addr + got) % page);
        if (want > PATH_MAX - got)
            want = PATH_MAX - got;
        struct iovec local = {.iov_base = out + got, .iov_len = want};
        struct iovec remote = {.iov_base = (void *)(uintptr_t)(addr + got), .iov_len = want};
        ssize_t r = process_vm_readv(pid, &local, 1, &remote, 1, 0);
        if (r <= 0)
            return -EFAULT;
        if (memchr(out + got, 0, (size_t)r))
            return 0;
        got += (size_t)r;
    }
    return -ENAMETOOLONG;
}

/* Perform the call relative to dirfd as the agent would have; returns the new
 * fd for an open, 0 for the others, or -errno. */
static int perform(const struct call *c, int dirfd)
{
    int r;
    switch (c->op) {
    case OP_OPEN:
        /* O_CLOEXEC here only: the agent's own O_CLOEXEC goes in ADDFD's newfd_flags. */
        r = openat(dirfd, c->path, c->flags | O_CLOEXEC, c->mode);
        return r < 0 ? -errno : r;
    case OP_MKDIR:
        r = mkdirat(dirfd, c->path, c->mode);
        return r < 0 ? -errno : 0;
    case OP_UNLINK:
        r = unlinkat(dirfd, c->path, c->flags & AT_REMOVEDIR);
        return r < 0 ? -errno : 0;
    }
    return -ENOSYS;
}

/* A descriptor of the directory the agent's path is relative to. */
static int agent_dir(pid_t pid, int dirfd_arg)
{
    char p[64];
    if (dirfd_arg == AT_FDCWD)
        snprintf(p, sizeof p, "/proc/%d/cwd", (int)pid);
    else
        snprintf(p, sizeof p, "/proc/%d/fd/%d", (int)pid, dirfd_arg);
    return open(p, O_PATH | O_DIRECTORY | O_CLOEXEC);
}

/* The protected-name check of hop1steps: a short list, matched against every
 * component (a name under `.vscode/` is as dangerous as `.vscode` itself),
 * plus `.git/hooks`. confine's guard (confine/protect/guard.py) knows more;
 * the cost that matters is walking the path once per call. */
static const char *const PROTECTED[] = {".envrc", ".vscode", ".idea", ".mcp.json", ".claude", ".gitmodules",
                                        ".bashrc", ".profile", NULL};

static int protected_name(const char *path)
{
    const char *s = path, *prev = NULL;
    size_t prev_len = 0;
    while (*s) {
        while (*s == '/')
            s++;
        const char *e = s;
        while (*e && *e != '/')
            e++;
        size_t len = (size_t)(e - s);
        if (len) {
            for (const char *const *p = PROTECTED; *p; p++)
                if (strlen(*p) == len && !memcmp(*p, s, len))
                    return 1;
            if (prev && prev_len == 4 && !memcmp(prev, ".git", 4) && len == 5 && !memcmp(s, "hooks", 5))
                return 1;
            prev = s;
            prev_len = len;
        }
        s = e;
    }
    return 0;
}

/* ---- the broker of hop2 ------------------------------------------------- */

struct reply {
    int32_t res;   /* >= 0: success (an fd comes with it for an open); < 0: -errno */
};

static void broker(int sock)
{
    struct call c;
    for (;;) {
        int dirfd;
        ssize_t r = recv_fd(sock, &c, sizeof c, &dirfd);
        if (r <= 0)
            _exit(0);   /* the supervisor closed its end: the run is over */
        struct reply rep;
        if (dirfd < 0 || (size_t)r < offsetof(struct call, path) + 1) {
            rep.res = -EPROTO;
        } else {
            c.path[PATH_MAX - 1] = 0;
            rep.res = perform(&c, dirfd);
        }
        if (dirfd >= 0)
            close(dirfd);
        int fd = c.op == OP_OPEN && rep.res >= 0 ? rep.res : -1;
        if (send_fd(sock, &rep, sizeof rep, fd))
            _exit(1);
        if (fd >= 0)
            close(fd);
    }
}

/* ---- the supervisor ----------------------------------------------------- */

static void answer(int listener, uint64_t id, const struct call *c, int res)
{
    if (c->op == OP_OPEN && res >= 0) {
        /* ADDFD + SEND installs the fd in the agent and returns its number as
         * the syscall's result in one step: no window where the fd exists but
         * the call is still pending. */
        struct seccomp_notif_addfd add = {
            .id = id, .flags = SECCOMP_ADDFD_FLAG_SEND, .srcfd = (uint32_t)res,
            .newfd_flags = (uint32_t)(c->flags & O_CLOEXEC)};
        /* ENOENT: the agent's call is gone (a signal, or it died): nothing to answer. */
        if (ioctl(listener, SECCOMP_IOCTL_NOTIF_ADDFD, &add) < 0 && errno != ENOENT)
            die("SECCOMP_IOCTL_NOTIF_ADDFD");
        close(res);
        return;
    }
    struct seccomp_notif_resp resp = {.id = id, .val = 0, .error = res < 0 ? res : 0, .flags = 0};
    if (ioctl(listener, SECCOMP_IOCTL_NOTIF_SEND, &resp) < 0 && errno != ENOENT)
        die("SECCOMP_IOCTL_NOTIF_SEND");
}

static void supervise(int listener, pid_t agent, int broker_sock)
{
    struct seccomp_notif_sizes sizes;
    if (syscall(SYS_seccomp, SECCOMP_GET_NOTIF_SIZES, 0, &sizes) < 0)
        die("SECCOMP_GET_NOTIF_SIZES");
    /* The kernel's struct may be larger than this header's: allocate its size. */
    struct seccomp_notif *req = calloc(1, sizes.seccomp_notif > sizeof *req ? sizes.seccomp_notif : sizeof *req);
    if (!req)
        die("calloc");
    /* hop1 and hop2 open the agent's cwd once: the workload never changes
     * it, and the floor is what is measured. hop1steps opens it per call, as
     * a mediator that cannot assume the cwd must. */
    int cwd = agent_dir(agent, AT_FDCWD);
    if (cwd < 0)
        die("open /proc/PID/cwd");
    static struct call c;
    struct pollfd pfd = {.fd = listener, .events = POLLIN};
    for (;;) {
        /* poll, not a blocking NOTIF_RECV: POLLHUP tells when the agent's
         * last task has gone, and confine waits the same way. */
        if (poll(&pfd, 1, -1) < 0) {
            if (errno == EINTR)
                continue;
            die("poll");
        }
        if (pfd.revents & POLLHUP)
            break;
        if (!(pfd.revents & POLLIN))
            continue;
        memset(req, 0, sizes.seccomp_notif);   /* the kernel refuses a dirty buffer */
        if (ioctl(listener, SECCOMP_IOCTL_NOTIF_RECV, req) < 0) {
            if (errno == EINTR || errno == ENOENT)
                continue;   /* ENOENT: the call went away before we took it */
            die("SECCOMP_IOCTL_NOTIF_RECV");
        }
        uint64_t addr;
        int res, pidfd = -1, dirfd = -1;
        if (decode(req, &c, &addr) < 0) {
            res = -ENOSYS;
        } else if ((res = read_path((pid_t)req->pid, addr, c.path)) < 0) {
            ;
        } else if (ioctl(listener, SECCOMP_IOCTL_NOTIF_ID_VALID, &req->id) < 0) {
            /* The pid may have been reused by another process between RECV
             * and the read: what was read is not the agent's. Drop it. */
            continue;
        } else {
            if (g_mode == HOP1STEPS) {
                /* A pidfd pins the process (confine keeps one per caller);
                 * the directory is looked up again for each call. */
                pidfd = (int)syscall(SYS_pidfd_open, (pid_t)req->pid, 0);
                dirfd = pidfd < 0 ? -1 : agent_dir((pid_t)req->pid, c.dirfd_arg);
                /* Every mediated name is judged, as confine's guard does: writing
                 * or removing a protected file is as much a change as making one. */
                if (dirfd < 0)
                    res = -EACCES;   /* what cannot be located is refused */
                else
                    res = protected_name(c.path) ? -EPERM : 0;
            } else {
                dirfd = c.dirfd_arg == AT_FDCWD ? cwd : agent_dir((pid_t)req->pid, c.dirfd_arg);
                res = dirfd < 0 ? -EACCES : 0;
            }
            if (res == 0 && g_mode == HOP2) {
                /* Hand the call to the broker with the directory; its answer
                 * carries the opened fd back. */
                size_t len = offsetof(struct call, path) + strlen(c.path) + 1;
                struct reply rep;
                int fd;
                if (send_fd(broker_sock, &c, len, dirfd) < 0 ||
                    recv_fd(broker_sock, &rep, sizeof rep, &fd) != (ssize_t)sizeof rep)
                    die("broker");
                res = rep.res;
                if (c.op == OP_OPEN && res >= 0) {
                    if (fd < 0)
                        die("broker: open without an fd");
                    res = fd;
                } else if (fd >= 0) {
                    close(fd);
                }
            } else if (res == 0) {
                res = perform(&c, dirfd);
            }
        }
        if (dirfd >= 0 && dirfd != cwd)
            close(dirfd);
        if (pidfd >= 0)
            close(pidfd);
        __atomic_add_fetch(g_handled, 1, __ATOMIC_SEQ_CST);
        answer(listener, req->id, &c, res);
    }
    close(cwd);
    free(req);
}

/* ---- the agent's workload ------------------------------------------------ */

static double now_us(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e6 + (double)t.tv_nsec / 1e3;
}

#define W (O_WRONLY | O_CREAT | O_TRUNC)

static void k_read(void)
{
    int fd = open("f", O_RDONLY);
    if (fd < 0)
        die("open f O_RDONLY");
    close(fd);
}

static void k_trunc(void)
{
    int fd = open("f", W, 0644);
    if (fd < 0)
        die("open f O_WRONLY|O_CREAT|O_TRUNC");
    close(fd);
}

static void k_create(void)
{
    int fd = open("g", W | O_EXCL, 0644);
    if (fd < 0)
        die("open g O_EXCL");
    close(fd);
    if (unlink("g"))
        die("unlink g");
}

static void k_mkdir(void)
{
    if (mkdir("d", 0755))
        die("mkdir d");
    if (rmdir("d"))
        die("rmdir d");
}

static void k_eexist(void)
{
    if (mkdir("e", 0755) == 0 || errno != EEXIST) {
        errno = errno ? errno : EINVAL;
        die("mkdir e: expected EEXIST");
    }
}

struct kind {
    const char *name;   /* bench/file_mediation.py's row */
    int mediated;       /* notified calls per op */
    void (*fn)(void);
};

static const struct kind KINDS[] = {
    {"open read-only (not mediated)", 0, k_read},
    {"open O_WRONLY|O_CREAT|O_TRUNC, existing", 1, k_trunc},
    {"create + unlink a new file", 2, k_create},
    {"mkdir + rmdir", 2, k_mkdir},
    {"mkdir of an existing directory (EEXIST)", 1, k_eexist},
};

static const char *result(int r)
{
    if (r == 0)
        return "ok";
    switch (errno) {
    case EPERM: return "EPERM";
    case EACCES: return "EACCES";
    case EEXIST: return "EEXIST";
    default: return strerror(errno);
    }
}

static void agent(long n)
{
    /* The files the kinds expect, made before the timed loops (they are
     * mediated too, and counted before the first kind's count is read). */
    k_trunc();
    if (mkdir("e", 0755) && errno != EEXIST)
        die("mkdir e");
    for (size_t k = 0; k < sizeof KINDS / sizeof KINDS[0]; k++) {
        for (int i = 0; i < 20; i++)   /* warm the caches, as file_mediation.py does */
            KINDS[k].fn();
        unsigned long before = __atomic_load_n(g_handled, __ATOMIC_SEQ_CST);
        double t = now_us();
        for (long i = 0; i < n; i++)
            KINDS[k].fn();
        double per = (now_us() - t) / (double)n;
        unsigned long notifs = __atomic_load_n(g_handled, __ATOMIC_SEQ_CST) - before;
        printf("{\"mode\": \"%s\", \"kind\": \"%s\", \"n\": %ld, \"us_per_op\": %.3f, \"mediated\": %d, "
               "\"notifs\": %lu}\n", MODE_NAMES[g_mode], KINDS[k].name, n, per, KINDS[k].mediated, notifs);
    }
    /* What the name check refuses, beside a plain name as the control. */
    int prot = mkdir(".vscode", 0755);
    const char *prot_s = result(prot);
    int plain = mkdir("plain", 0755);
    const char *plain_s = result(plain);
    printf("{\"mode\": \"%s\", \"kind\": \"probe\", \"protected_mkdir\": \"%s\", \"plain_mkdir\": \"%s\"}\n",
           MODE_NAMES[g_mode], prot_s, plain_s);
    if (prot == 0)
        rmdir(".vscode");
    if (plain == 0)
        rmdir("plain");
    unlink("f");
    rmdir("e");
    fflush(stdout);
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: hop bare|hop1|hop2|hop1steps N\n");
        return 125;
    }
    int m;
    for (m = 0; m < 4 && strcmp(argv[1], MODE_NAMES[m]); m++)
        ;
    char *end;
    long n = strtol(argv[2], &end, 10);
    if (m == 4 || *end || n <= 0) {
        fprintf(stderr, "hop: bad mode or N: %s %s\n", argv[1], argv[2]);
        return 125;
    }
    g_mode = (enum mode)m;
    g_handled = mmap(NULL, sizeof *g_handled, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (g_handled == MAP_FAILED)
        die("mmap");
    *g_handled = 0;
    if (g_mode == BARE) {
        agent(n);
        return 0;
    }
    /* hop2's broker is forked first so it holds neither the listener nor the
     * agent: it only ever sees the calls the supervisor sends it. */
    int bsock[2] = {-1, -1};
    pid_t bpid = -1;
    if (g_mode == HOP2) {
        if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, bsock))
            die("socketpair (broker)");
        bpid = fork();
        if (bpid < 0)
            die("fork (broker)");
        if (bpid == 0) {
            close(bsock[0]);
            broker(bsock[1]);
        }
        close(bsock[1]);
    }
    int lsock[2];
    if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, lsock))
        die("socketpair (listener)");
    fflush(stdout);
    pid_t apid = fork();
    if (apid < 0)
        die("fork (agent)");
    if (apid == 0) {
        /* The agent installs its own filter (no_new_privs is per process) and
         * gives the listener away: it must not be able to answer itself. */
        if (bsock[0] >= 0)
            close(bsock[0]);
        close(lsock[0]);
        int listener = install_filter();
        char one = 1;
        if (send_fd(lsock[1], &one, 1, listener))
            die("send listener");
        close(listener);
        close(lsock[1]);
        agent(n);
        _exit(0);
    }
    close(lsock[1]);
    char one;
    int listener;
    if (recv_fd(lsock[0], &one, 1, &listener) != 1 || listener < 0)
        die("receive listener");
    close(lsock[0]);
    /* As confine does (kernel/notify.py sync_wake_up): the supervisor runs on the
     * calling agent's CPU (Linux 6.6+; older kernels refuse, and nothing else changes). */
    (void)ioctl(listener, SECCOMP_IOCTL_NOTIF_SET_FLAGS, (unsigned long)SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP);
    supervise(listener, apid, bsock[0]);
    close(listener);
    int st;
    if (waitpid(apid, &st, 0) < 0)
        die("waitpid agent");
    if (bpid > 0) {
        close(bsock[0]);
        waitpid(bpid, NULL, 0);
    }
    if (WIFEXITED(st))
        return WEXITSTATUS(st);
    fprintf(stderr, "hop: agent killed by signal %d\n", WTERMSIG(st));
    return 2;
}
