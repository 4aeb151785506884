/* cgroup helpers against fake v1 and v2 trees: detection, paths, limit files, freeze,
 * statistics, parsing. The real v1 hierarchy is exercised by the integration tests. */
#include "fake.h"
#include <errno.h>
#include "runtime/cgroup.h"

static const char *const v1_ctrls[] = { "memory", "cpu", "pids", "freezer" };

static char *fake_v1(void) {
        char *root = fake_mkdtemp();
        for (size_t i = 0; i < 4; i++)
                fake_mkdir(root, v1_ctrls[i]);
        return root;
}

static char *fake_v2(const char *controllers) {
        char *root = fake_mkdtemp();
        fake_put(root, "cgroup.controllers", controllers);
        fake_put(root, "cgroup.subtree_control", "");
        fake_put(root, "space/cgroup.subtree_control", "");
        return root;
}

/* Populates a group's directory with the knobs the kernel would create. */
static void fake_knobs(const char *root, const char *dir, const char *const *files) {
        char rel[512];
        for (; *files; files++) {
                PJ(rel, "%s/%s", dir, *files);
                fake_put(root, rel, "");
        }
}

static void test_detect(void **state) {
        printf("# detect: v1 by a memory hierarchy, v2 by cgroup.controllers, else -ENOTSUP\n");
        _cleanup_free_ char *v1 = fake_v1();
        _cleanup_free_ char *v2 = fake_v2("memory pids\n");
        _cleanup_free_ char *none = fake_mkdtemp();
        enum rt_cgroup_version v = 0;
        assert_int_equal(rt_cgroup_detect(v1, &v), 0);
        assert_int_equal(v, RT_CGROUP_V1);
        assert_int_equal(rt_cgroup_detect(v2, &v), 0);
        assert_int_equal(v, RT_CGROUP_V2);
        v = 0;
        assert_int_equal(rt_cgroup_detect(none, &v), -ENOTSUP);
        assert_int_equal(v, 0); /* untouched on failure */
        rt_rm_rf(v1);
        rt_rm_rf(v2);
        rt_rm_rf(none);
}

static void test_v1_create_paths_remove(void **state) {
        printf("# v1: host_init makes space/ per controller; create makes one group each; names checked\n");
        _cleanup_free_ char *root = fake_v1();
        assert_int_equal(rt_cgroup_host_init(root), 0);
        assert_int_equal(rt_cgroup_host_init(root), 0); /* idempotent */
        for (size_t i = 0; i < 4; i++) {
                char rel[64];
                PJ(rel, "%s/space", v1_ctrls[i]);
                assert_true(fake_exists(root, rel));
        }
        struct rt_cgroup *cg = NULL;
        assert_int_equal(rt_cgroup_create(root, "sbx_a1", &cg), 0);
        assert_int_equal(rt_cgroup_get_version(cg), RT_CGROUP_V1);
        assert_true(fake_exists(root, "memory/space/sbx_a1"));
        assert_true(fake_exists(root, "freezer/space/sbx_a1"));
        _cleanup_free_ char *p = NULL;
        assert_int_equal(rt_cgroup_path(cg, RT_CG_CPU, "cpu.cfs_quota_us", &p), 0);
        char want[512];
        PJ(want, "%s/cpu/space/sbx_a1/cpu.cfs_quota_us", root);
        assert_string_equal(p, want);

        struct rt_cgroup *dup = NULL;
        assert_int_equal(rt_cgroup_create(root, "sbx_a1", &dup), -EEXIST);
        assert_null(dup);
        /* a failed create leaves nothing: pids/ exists already, the others are rolled back */
        fake_mkdir(root, "pids/space/sbx_b");
        assert_int_equal(rt_cgroup_create(root, "sbx_b", &dup), -EEXIST);
        assert_false(fake_exists(root, "memory/space/sbx_b"));

        char longname[RT_CGROUP_MAX_NAME + 2];
        memset(longname, 'x', sizeof longname - 1);
        longname[sizeof longname - 1] = 0;
        const char *const bad[] = { "", "../x", "a/b", ".hidden", "sp ace", longname };
        for (size_t i = 0; i < ELEMENTSOF(bad); i++)
                assert_int_equal(rt_cgroup_create(root, bad[i], &dup), -EINVAL);

        assert_int_equal(rt_cgroup_remove(cg), 0);
        assert_false(fake_exists(root, "memory/space/sbx_a1"));
        assert_false(fake_exists(root, "freezer/space/sbx_a1"));
        rt_cgroup_free(cg);

        struct rt_cgroup *o = NULL;
        assert_int_equal(rt_cgroup_open(root, "sbx_a1", &o), -ENOENT);
        rt_rm_rf(root);
}

static void test_v1_limits(void **state) {
        printf("# v1: memory (+memsw = no swap), cpu quota/period, pids.max\n");
        _cleanup_free_ char *root = fake_v1();
        assert_int_equal(rt_cgroup_host_init(root), 0);
        struct rt_cgroup *cg = NULL;
        assert_int_equal(rt_cgroup_create(root, "s1", &cg), 0);
        static const char *const mem[] = { "memory.limit_in_bytes", "memory.memsw.limit_in_bytes", NULL };
        static const char *const cpu[] = { "cpu.cfs_period_us", "cpu.cfs_quota_us", NULL };
        fake_knobs(root, "memory/space/s1", mem);
        fake_knobs(root, "cpu/space/s1", cpu);

        assert_int_equal(rt_cgroup_set_memory(cg, 64u << 20), 0);
        assert_string_equal(fake_get(root, "memory/space/s1/memory.limit_in_bytes"), "67108864");
        assert_string_equal(fake_get(root, "memory/space/s1/memory.memsw.limit_in_bytes"), "67108864");
        assert_int_equal(rt_cgroup_set_memory(cg, 0), 0);
        assert_string_equal(fake_get(root, "memory/space/s1/memory.limit_in_bytes"), "-1");

        assert_int_equal(rt_cgroup_set_cpu(cg, 1500), 0);
        assert_string_equal(fake_get(root, "cpu/space/s1/cpu.cfs_period_us"), "100000");
        assert_string_equal(fake_get(root, "cpu/space/s1/cpu.cfs_quota_us"), "150000");
        assert_int_equal(rt_cgroup_set_cpu(cg, 0), 0);
        assert_string_equal(fake_get(root, "cpu/space/s1/cpu.cfs_quota_us"), "-1");
        assert_int_equal(rt_cgroup_set_cpu(cg, 5), -ERANGE);
        assert_int_equal(rt_cgroup_set_cpu(cg, RT_CGROUP_MAX_CPU_MILLIS + 1), -ERANGE);

        /* pids.max missing: the knob is reported, not silently skipped */
        assert_int_equal(rt_cgroup_set_pids(cg, 100), -ENOENT);
        fake_put(root, "pids/space/s1/pids.max", "");
        assert_int_equal(rt_cgroup_set_pids(cg, 100), 0);
        assert_string_equal(fake_get(root, "pids/space/s1/pids.max"), "100");
        assert_int_equal(rt_cgroup_set_pids(cg, 0), 0);
        assert_string_equal(fake_get(root, "pids/space/s1/pids.max"), "max");

        /* no swap accounting: memsw absent is fine */
        unlink(strcat(strcpy((char[512]){ 0 }, root), "/memory/space/s1/memory.memsw.limit_in_bytes"));
        assert_int_equal(rt_cgroup_set_memory(cg, 1u << 30), 0);
        assert_string_equal(fake_get(root, "memory/space/s1/memory.limit_in_bytes"), "1073741824");
        rt_cgroup_free(cg);
        rt_rm_rf(root);
}

static void test_v1_attach_freeze_stats(void **state) {
        printf("# v1: attach writes every controller, freezer.state, oom_kill/usage/pids parsing\n");
        _cleanup_free_ char *root = fake_v1();
        assert_int_equal(rt_cgroup_host_init(root), 0);
        fake_mkdir(root, "memory/space/s2");
        fake_mkdir(root, "cpu/space/s2");
        fake_mkdir(root, "pids/space/s2");
        fake_mkdir(root, "freezer/space/s2");
        struct rt_cgroup *cg = NULL;
        assert_int_equal(rt_cgroup_open(root, "s2", &cg), 0);
        for (size_t i = 0; i < 4; i++) {
                char rel[128];
                PJ(rel, "%s/space/s2/cgroup.procs", v1_ctrls[i]);
                fake_put(root, rel, "");
        }
        assert_int_equal(rt_cgroup_attach(cg, 4242), 0);
        for (size_t i = 0; i < 4; i++) {
                char rel[128];
                PJ(rel, "%s/space/s2/cgroup.procs", v1_ctrls[i]);
                assert_string_equal(fake_get(root, rel), "4242");
        }
        assert_int_equal(rt_cgroup_attach(cg, 0), -EINVAL);

        fake_put(root, "freezer/space/s2/freezer.state", "THAWED\n");
        bool fr = true;
        assert_int_equal(rt_cgroup_is_frozen(cg, &fr), 0);
        assert_false(fr);
        assert_int_equal(rt_cgroup_freeze(cg, true), 0);
        assert_string_equal(fake_get(root, "freezer/space/s2/freezer.state"), "FROZEN");
        assert_int_equal(rt_cgroup_is_frozen(cg, &fr), 0);
        assert_true(fr);
        assert_int_equal(rt_cgroup_freeze(cg, false), 0);
        assert_string_equal(fake_get(root, "freezer/space/s2/freezer.state"), "THAWED");

        fake_put(root, "memory/space/s2/memory.oom_control", "oom_kill_disable 0\nunder_oom 0\noom_kill 3\n");
        fake_put(root, "memory/space/s2/memory.usage_in_bytes", "123456\n");
        fake_put(root, "pids/space/s2/pids.current", "7\n");
        uint64_t v = 0;
        assert_int_equal(rt_cgroup_oom_kills(cg, &v), 0);
        assert_int_equal(v, 3);
        assert_int_equal(rt_cgroup_memory_current(cg, &v), 0);
        assert_int_equal(v, 123456);
        uint32_t n = 0;
        assert_int_equal(rt_cgroup_pids_current(cg, &n), 0);
        assert_int_equal(n, 7);
        fake_put(root, "pids/space/s2/pids.current", "garbage\n");
        assert_int_equal(rt_cgroup_pids_current(cg, &n), -EBADMSG);
        assert_int_equal(n, 7);

        fake_put(root, "freezer/space/s2/cgroup.procs", "10\n11\n12\n");
        unsigned c = 0;
        assert_int_equal(rt_cgroup_count_procs(cg, &c), 0);
        assert_int_equal(c, 3);
        fake_put(root, "freezer/space/s2/cgroup.procs", "");
        assert_int_equal(rt_cgroup_kill_all(cg), 0); /* empty group: nothing to do */
        rt_cgroup_free(cg);
        rt_rm_rf(root);
}

static void test_v2_host_init(void **state) {
        printf("# v2: host_init enables memory, pids, cpu on the root and on space/\n");
        _cleanup_free_ char *root = fake_v2("cpuset cpu io memory hugetlb pids rdma misc\n");
        assert_int_equal(rt_cgroup_host_init(root), 0);
        assert_string_equal(fake_get(root, "cgroup.subtree_control"), "+memory +pids +cpu");
        assert_string_equal(fake_get(root, "space/cgroup.subtree_control"), "+memory +pids +cpu");
        rt_rm_rf(root);

        _cleanup_free_ char *nocpu = fake_v2("memory pids\n");
        assert_int_equal(rt_cgroup_host_init(nocpu), 0);
        assert_string_equal(fake_get(nocpu, "space/cgroup.subtree_control"), "+memory +pids");
        rt_rm_rf(nocpu);

        /* "cpuset" must not count as "cpu", nor "pids_x" as "pids" */
        _cleanup_free_ char *nopids = fake_v2("cpuset memory pids_x\n");
        assert_int_equal(rt_cgroup_host_init(nopids), -ENOTSUP);
        rt_rm_rf(nopids);
}

static void test_v2_limits_freeze_stats(void **state) {
        printf("# v2: memory.max + swap.max 0, cpu.max, pids.max, cgroup.freeze/events, memory.events\n");
        _cleanup_free_ char *root = fake_v2("cpu memory pids\n");
        assert_int_equal(rt_cgroup_host_init(root), 0);
        struct rt_cgroup *cg = NULL;
        assert_int_equal(rt_cgroup_create(root, "sbx_v2", &cg), 0);
        assert_int_equal(rt_cgroup_get_version(cg), RT_CGROUP_V2);
        _cleanup_free_ char *p = NULL;
        assert_int_equal(rt_cgroup_path(cg, RT_CG_FREEZER, NULL, &p), 0);
        char want[512];
        PJ(want, "%s/space/sbx_v2", root);
        assert_string_equal(p, want);

        static const char *const knobs[] = { "memory.max", "memory.swap.max", "cpu.max", "pids.max",
                                             "cgroup.procs", "cgroup.freeze", NULL };
        fake_knobs(root, "space/sbx_v2", knobs);
        assert_int_equal(rt_cgroup_set_memory(cg, 256u << 20), 0);
        assert_string_equal(fake_get(root, "space/sbx_v2/memory.max"), "268435456");
        assert_string_equal(fake_get(root, "space/sbx_v2/memory.swap.max"), "0");
        assert_int_equal(rt_cgroup_set_memory(cg, 0), 0);
        assert_string_equal(fake_get(root, "space/sbx_v2/memory.max"), "max");
        assert_int_equal(rt_cgroup_set_cpu(cg, 500), 0);
        assert_string_equal(fake_get(root, "space/sbx_v2/cpu.max"), "50000 100000");
        assert_int_equal(rt_cgroup_set_cpu(cg, 0), 0);
        assert_string_equal(fake_get(root, "space/sbx_v2/cpu.max"), "max 100000");
        assert_int_equal(rt_cgroup_set_pids(cg, 64), 0);
        assert_string_equal(fake_get(root, "space/sbx_v2/pids.max"), "64");
        assert_int_equal(rt_cgroup_attach(cg, 99), 0);
        assert_string_equal(fake_get(root, "space/sbx_v2/cgroup.procs"), "99");

        fake_put(root, "space/sbx_v2/cgroup.events", "populated 1\nfrozen 1\n");
        assert_int_equal(rt_cgroup_freeze(cg, true), 0);
        assert_string_equal(fake_get(root, "space/sbx_v2/cgroup.freeze"), "1");
        /* the kernel never reports thawed: freeze(false) gives up after its timeout */
        assert_int_equal(rt_cgroup_freeze(cg, false), -ETIMEDOUT);
        fake_put(root, "space/sbx_v2/cgroup.events", "populated 1\nfrozen 0\n");
        assert_int_equal(rt_cgroup_freeze(cg, false), 0);
        assert_string_equal(fake_get(root, "space/sbx_v2/cgroup.freeze"), "0");

        fake_put(root, "space/sbx_v2/memory.events", "low 0\nhigh 0\nmax 12\noom 2\noom_kill 2\noom_group_kill 0\n");
        fake_put(root, "space/sbx_v2/memory.current", "4096\n");
        uint64_t v = 0;
        assert_int_equal(rt_cgroup_oom_kills(cg, &v), 0);
        assert_int_equal(v, 2);
        assert_int_equal(rt_cgroup_memory_current(cg, &v), 0);
        assert_int_equal(v, 4096);

        /* cgroup.kill present but the group is empty: returns without writing */
        fake_put(root, "space/sbx_v2/cgroup.kill", "");
        fake_put(root, "space/sbx_v2/cgroup.procs", "");
        assert_int_equal(rt_cgroup_kill_all(cg), 0);
        assert_string_equal(fake_get(root, "space/sbx_v2/cgroup.kill"), "");
        rt_cgroup_free(cg);
        rt_rm_rf(root);
}

static void test_usage_reads(void **state) {
        (void)state;
        printf("# cpu time and memory limit: v1 with cpuacct apart, v1 co-mounted, v2\n");
        /* v1, cpuacct a hierarchy of its own: create makes, attach fills and remove removes
         * the sandbox's cpuacct group; cpuacct.usage is read there */
        _cleanup_free_ char *root = fake_v1();
        fake_mkdir(root, "cpuacct");
        assert_int_equal(rt_cgroup_host_init(root), 0);
        struct rt_cgroup *cg = NULL;
        assert_int_equal(rt_cgroup_create(root, "m1", &cg), 0);
        fake_put(root, "cpuacct/space/m1/cgroup.procs", "");
        for (size_t i = 0; i < 4; i++) {
                char rel[128];
                PJ(rel, "%s/space/m1/cgroup.procs", v1_ctrls[i]);
                fake_put(root, rel, "");
        }
        assert_int_equal(rt_cgroup_attach(cg, 77), 0);
        assert_string_equal(fake_get(root, "cpuacct/space/m1/cgroup.procs"), "77");
        uint64_t v = 1;
        fake_put(root, "cpuacct/space/m1/cpuacct.usage", "2500000000\n");
        assert_int_equal(rt_cgroup_cpu_usage_ns(cg, &v), 0);
        assert_int_equal(v, 2500000000ull);
        fake_put(root, "cpuacct/space/m1/cpuacct.usage", "x\n");
        assert_int_equal(rt_cgroup_cpu_usage_ns(cg, &v), -EBADMSG);
        assert_int_equal(v, 2500000000ull); /* untouched on failure */
        fake_put(root, "memory/space/m1/memory.limit_in_bytes", "9223372036854771712\n");
        assert_int_equal(rt_cgroup_memory_limit(cg, &v), 0);
        assert_int_equal(v, 0);
        fake_put(root, "memory/space/m1/memory.limit_in_bytes", "268435456\n");
        assert_int_equal(rt_cgroup_memory_limit(cg, &v), 0);
        assert_int_equal(v, 268435456);
        rt_cgroup_free(cg);
        /* open finds it again */
        assert_int_equal(rt_cgroup_open(root, "m1", &cg), 0);
        assert_int_equal(rt_cgroup_cpu_usage_ns(cg, &v), -EBADMSG);
        rt_cgroup_free(cg);
        rt_rm_rf(root);

        /* v1 without a cpuacct hierarchy apart: cpu's group (co-mounted "cpu,cpuacct") */
        _cleanup_free_ char *r2 = fake_v1();
        assert_int_equal(rt_cgroup_host_init(r2), 0);
        assert_int_equal(rt_cgroup_create(r2, "m2", &cg), 0);
        assert_int_equal(rt_cgroup_cpu_usage_ns(cg, &v), -ENOENT);
        fake_put(r2, "cpu/space/m2/cpuacct.usage", "42\n");
        assert_int_equal(rt_cgroup_cpu_usage_ns(cg, &v), 0);
        assert_int_equal(v, 42);
        rt_cgroup_free(cg);
        rt_rm_rf(r2);

        /* v2: cpu.stat usage_usec, memory.max */
        _cleanup_free_ char *r3 = fake_v2("cpu memory pids\n");
        assert_int_equal(rt_cgroup_host_init(r3), 0);
        assert_int_equal(rt_cgroup_create(r3, "m3", &cg), 0);
        fake_put(r3, "space/m3/cpu.stat", "usage_usec 1500\nuser_usec 1000\nsystem_usec 500\n");
        assert_int_equal(rt_cgroup_cpu_usage_ns(cg, &v), 0);
        assert_int_equal(v, 1500000);
        fake_put(r3, "space/m3/memory.max", "max\n");
        assert_int_equal(rt_cgroup_memory_limit(cg, &v), 0);
        assert_int_equal(v, 0);
        fake_put(r3, "space/m3/memory.max", "1048576\n");
        assert_int_equal(rt_cgroup_memory_limit(cg, &v), 0);
        assert_int_equal(v, 1048576);
        rt_cgroup_free(cg);
        rt_rm_rf(r3);
}

static void test_parse_keyed(void **state) {
        printf("# keyed-file parser: exact keys, missing keys, bad numbers\n");
        uint64_t v = 77;
        const char *t = "oom 5\noom_kill 2\nfrozen 1";
        assert_int_equal(rt_cgroup_parse_keyed(t, "oom", &v), 0);
        assert_int_equal(v, 5);
        assert_int_equal(rt_cgroup_parse_keyed(t, "oom_kill", &v), 0);
        assert_int_equal(v, 2);
        assert_int_equal(rt_cgroup_parse_keyed(t, "frozen", &v), 0);
        assert_int_equal(v, 1);
        v = 77;
        assert_int_equal(rt_cgroup_parse_keyed(t, "oom_k", &v), -ENOENT);
        assert_int_equal(rt_cgroup_parse_keyed("", "oom", &v), -ENOENT);
        assert_int_equal(rt_cgroup_parse_keyed("oom x\n", "oom", &v), -EBADMSG);
        assert_int_equal(rt_cgroup_parse_keyed("oom 3x\n", "oom", &v), -EBADMSG);
        assert_int_equal(v, 77);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_detect),
                cmocka_unit_test(test_v1_create_paths_remove),
                cmocka_unit_test(test_v1_limits),
                cmocka_unit_test(test_v1_attach_freeze_stats),
                cmocka_unit_test(test_v2_host_init),
                cmocka_unit_test(test_v2_limits_freeze_stats),
                cmocka_unit_test(test_parse_keyed),
                cmocka_unit_test(test_usage_reads),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
