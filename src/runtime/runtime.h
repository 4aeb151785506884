/* The runtime driver interface: how a sandbox is made. spaced calls only this table;
 * each driver (ns/, later gvisor/, microvm/) fills one. */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* Root inside every ns sandbox maps to this uid/gid outside; ids 0..RT_ID_COUNT-1 inside
 * map to RT_ID_BASE.. outside. Template trees are stored shifted into this range. */
#define RT_ID_BASE 100000u
#define RT_ID_COUNT 65536u

struct rt_limits {
        uint64_t memory_bytes; /* 0 = driver default */
        uint32_t cpu_millis;   /* 1000 = one CPU; 0 = no limit */
        uint32_t pids;         /* 0 = driver default */
        uint32_t nofile;       /* RLIMIT_NOFILE inside; 0 = driver default */
        /* Writable layer (upper + work dirs): bytes and inodes it may hold; 0 = no limit.
         * Needs a quota-capable filesystem under upper_dir (rt_volume_prepare in
         * runtime/quota.h): -EOPNOTSUPP otherwise. Writes past it fail inside with
         * EDQUOT (ENOSPC on XFS). */
        uint64_t disk_bytes;
        uint64_t disk_inodes;
};

struct rt_spec {
        const char *id;          /* "sbx_…"; also the hostname and the cgroup name */
        const char *lower_dirs;  /* overlayfs lowerdir list, ':'-separated, top first (template layers) */
        const char *upper_dir;   /* the sandbox's writable layer (session files) */
        const char *work_dir;    /* overlayfs workdir, same filesystem as upper_dir, empty */
        const char *run_dir;     /* empty host dir the driver may use (rootfs mount point, …) */
        const char *init_path;   /* host path of the static space-init binary */
        struct rt_limits limits;
        /* false: the sandbox gets a network namespace of its own with loopback only.
         * true (drivers with ops.network): it joins the prepared network namespace
         * netns_fd instead (spaced's network room made it, owned by the host's user
         * namespace: root inside has no CAP_NET_ADMIN or CAP_NET_RAW over it; lo is up
         * already). -EINVAL if netns_fd is not a network namespace. */
        bool network;
        int netns_fd;
        /* A host file bind-mounted read-only at /etc/resolv.conf when the rootfs has /etc
         * (the room's resolver); NULL: the rootfs's own. */
        const char *resolv_conf;
        /* Drivers with memory_snapshots only (else ignored): a directory holding what an
         * earlier checkpoint() of this driver wrote, copied back out of the store. create()
         * then restores those processes instead of booting space-init afresh; upper_dir
         * already holds the files of the same snapshot. NULL = boot. -EINVAL if the image
         * is not one this driver (or this version of it) wrote. The directory is the
         * caller's scratch copy: create() may change files in it (gvisor rebuilds its state
         * file there); the daemon keeps it at SANDBOX_DIR/checkpoint and removes it after. */
        const char *restore_dir;
};

#define RT_HEALTH_DETAIL_MAX 320

struct rt_health {
        bool alive;             /* space-init still runs */
        bool oom_killed;        /* the memory limit killed something since create */
        int init_status;        /* wait status of space-init once !alive */
        uint64_t memory_bytes;  /* current usage */
        uint32_t pids;          /* current number of tasks */
        uint64_t cpu_ns;        /* CPU time used since create (0: unknown) */
        uint64_t memory_limit_bytes; /* what memory_bytes may reach; 0: none or unknown */
        /* Set by a driver that saw init's sandbox end without learning how (gvisor: the
         * sandbox process is not its child): init_status is then a stand-in, and detail
         * says what it does know, for people (e.g. where runsc's log was kept). */
        bool status_unknown;
        char detail[RT_HEALTH_DETAIL_MAX];
};

struct rt_sandbox; /* driver-private */

struct runtime_ops {
        const char *name;
        bool memory_snapshots;
        /* checkpoint(…, leave_running = true) works: the daemon then puts a memory image
         * in every snapshot of a running session (manual, rolling, fork), not only in
         * pause's; and since the files only reach upper_dir through a checkpoint, it does
         * not skip a rolling snapshot because upper_dir looks unchanged (microvm). */
        bool live_checkpoint;
        /* upper_dir comes back holding every file above the template, the lower layers
         * above it merged in (microvm exports the guest's disk), not as an overlayfs upper
         * layer over them: the daemon then captures it alone, never over its snapshot
         * layer (docs/sessions.md, "Snapshot layers"). */
        bool merged_upper;
        /* A checkpoint's image files are rewritten in place: a page that did not change
         * stays at the same file offset (microvm's RAM file and qcow2 disk). The daemon then
         * stores them with fixed-size chunks (store_capture_opts.fixed_chunk), which a
         * scattered dirty page costs far less than a content-defined chunk. Not for
         * serialized streams whose contents move (gvisor's state file: fixed chunks there
         * dedup nothing, docs/performance.md). */
        bool image_in_place;
        /* Sandboxes can join a prepared network namespace (rt_spec.network, netns_fd):
         * the daemon refuses egress for a driver without it. What each driver does with
         * it (gvisor: runsc's netstack takes eth0 over; microvm: QEMU's user-mode network
         * runs in it) is in docs/runtime-gvisor.md and docs/runtime-microvm.md. */
        bool network;
        /* Host-level preparation once per daemon start (cgroup parents, …). */
        int (*host_init)(const char *data_dir);
        /* Makes a running sandbox whose PID 1 is spec->init_path, connected to the caller by
         * the stream socket returned by init_fd(). Nothing is left behind on failure. */
        int (*create)(const struct rt_spec *spec, struct rt_sandbox **ret);
        /* Re-creates the handle of a sandbox that outlived the process that made it (a
         * daemon restart): init_pid is its init as create reported it, spec the spec it was
         * made with. Checks that the pid really is that sandbox's init (-ESRCH if not, or
         * if it died) and reconnects to space-init, which then says HELLO again. Nothing of
         * the sandbox is changed on failure. NULL when the driver can't. */
        int (*adopt)(const struct rt_spec *spec, pid_t init_pid, struct rt_sandbox **ret);
        /* Closes the connection to space-init and makes a new one (init_fd() then returns
         * it), as adopt() does: after the caller refused what answered on the old one
         * (protocol.md §1, the init key). NULL when the driver can't. */
        int (*reconnect)(struct rt_sandbox *sb);
        /* Socket connected to space-init; owned by the sandbox (closed by destroy). */
        int (*init_fd)(struct rt_sandbox *sb);
        /* pidfd of space-init: readable when the sandbox's init has died. Owned by the sandbox. */
        int (*pid_fd)(struct rt_sandbox *sb);
        pid_t (*init_pid)(struct rt_sandbox *sb);
        /* The sandbox's network namespace (an fd it owns, valid until destroy/release), which
         * spaced enters to connect to a port inside (ingress: daemon/net/ingress.h). NULL in
         * a driver without one: its sessions have no exposed ports. */
        int (*netns_fd)(struct rt_sandbox *sb);
        int (*freeze)(struct rt_sandbox *sb);
        int (*thaw)(struct rt_sandbox *sb);
        int (*health)(struct rt_sandbox *sb, struct rt_health *ret);
        /* Frees sb and closes its fds but leaves the sandbox running (the daemon stops;
         * adopt() finds it again). Accepts NULL. */
        void (*release)(struct rt_sandbox *sb);
        /* Drivers with memory_snapshots (NULL otherwise): saves the processes of a running
         * sandbox (memory, fds, space-init with its background-process table) as plain
         * files in dir (exists, empty), such that create() with spec.restore_dir = a copy
         * of dir brings them back. The image is meant for the snapshot store: keep it
         * uncompressed and page-aligned so that content-defined chunking dedups a second
         * checkpoint that changed little. leave_running: the sandbox goes on afterwards
         * with the same init_fd() and connection (requests in flight carry on; no new
         * HELLO), frozen again if it was frozen; otherwise it is stopped and only
         * destroy() is left to call. A driver that cannot
         * go on reliably refuses leave_running with -EOPNOTSUPP (gvisor). Whatever the file
         * layer (upper_dir) needs to match the image is flushed before it returns. */
        int (*checkpoint)(struct rt_sandbox *sb, const char *dir, bool leave_running);
        /* For a warm pool, which makes sandboxes before it knows who gets them: gives a
         * sandbox that create() made and nothing has used yet exactly what create() with
         * limits l would have given it. NULL when the driver can't. A limit the driver can
         * only set at create (disk limits of ns) is -EOPNOTSUPP. On failure the sandbox
         * may be half-changed: destroy it, never hand it out. */
        int (*set_limits)(struct rt_sandbox *sb, const struct rt_limits *l);
        /* Kills every process, unmounts, removes cgroups, frees sb. Accepts NULL. */
        int (*destroy)(struct rt_sandbox *sb);
        /* For what a sandbox left behind when its rt_sandbox was lost (daemon crash):
         * kills its processes, unmounts run_dir's rootfs, removes its cgroups. Idempotent;
         * 0 when nothing was left. Never call it for a sandbox still held. */
        int (*reclaim)(const char *id, const char *run_dir);
};

extern const struct runtime_ops rt_ns_ops;
extern const struct runtime_ops rt_gvisor_ops;  /* src/runtime/gvisor/: runsc, memory snapshots */
extern const struct runtime_ops rt_microvm_ops; /* src/runtime/microvm/: QEMU microvm, memory + disk */
/* The microvm driver's accelerator and why (docs/runtime-microvm.md, "Accelerator"). */
struct rt_accel_info {
        char name[8];         /* "kvm" or "tcg" */
        char reason[384];     /* for people: the setting, the probe's rates, a failed KVM boot */
        int64_t kernel_ips;   /* probe: guest kernel-mode instructions/s (0: not probed) */
        int64_t user_ips;     /* probe: guest user-mode instructions/s (0: not probed) */
        int64_t min_ips;      /* the probe's threshold for kvm (0: not probed) */
        int64_t probe_us;     /* what this process's probe cost (0: none ran) */
        bool cached;          /* the verdict came from the per-boot cache file */
};
/* SPACE_MICROVM_ACCEL=auto (default; unset or empty too): a probe of /dev/kvm of a few
 * milliseconds, once per host boot (cached in the guest dir); kvm or tcg: as said.
 * -EINVAL for another setting (runtime_last_error says). Thread-safe. */
int rt_microvm_accel_info(struct rt_accel_info *ret);
/* Its name: "kvm", "tcg" ("invalid" for a bad setting). */
const char *rt_microvm_accel(void);

/* The i-th driver of the table (0, 1, ...); NULL past the last. */
const struct runtime_ops *runtime_nth(size_t i);
/* NULL if no driver has that name. */
const struct runtime_ops *runtime_find(const char *name);

/* What the last failing runtime call on this thread did wrong, for humans: "ns: mount
 * /proc: Operation not permitted". "" when none. Set next to a negative errno return;
 * valid until the next runtime call on the same thread. */
const char *runtime_last_error(void);
/* For drivers: records that message (printf-style). */
void runtime_set_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
