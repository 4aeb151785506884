/* The microvm driver's accelerator probe (src/runtime/microvm/accel.c): a tiny guest on
 * /dev/kvm, timed in kernel and user mode; the verdict follows the threshold both ways,
 * says why, and is cached per host boot. On a PVM host (kvm_pvm loaded, like ours) it
 * must say tcg because guest kernel mode is emulated. Fast; needs read-write /dev/kvm
 * for the parts that run the probe guest (root here), and skips them otherwise. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cmocka.h>

#include "common/macros.h"
#include "runtime/fsutil.h"
#include "runtime/microvm/microvm.h"
#include "runtime/runtime.h"

#define PJ(buf, ...) assert_true(snprintf(buf, sizeof buf, __VA_ARGS__) < (int)sizeof buf)
static char dir[256];
static bool kvm_runs; /* the probe guest ran (its rate is known) */

static void show(const char *what, const struct rt_accel_info *ai) {
        printf("# %s: %s; kernel %lld/s, user %lld/s, threshold %lld/s, probe %lld us%s\n#   reason: %s\n", what,
               ai->name, (long long)ai->kernel_ips, (long long)ai->user_ips, (long long)ai->min_ips,
               (long long)ai->probe_us, ai->cached ? " (cached)" : "", ai->reason);
}

static void test_probe_here(void **state) {
        (void)state;
        printf("# the probe with the default threshold: the verdict follows the measured rate\n");
        struct rt_accel_info ai;
        assert_int_equal(mv_accel_probe(MV_KVM_MIN_IPS, &ai), 0);
        show("probe", &ai);
        printf("{\"bench\":\"microvm-accel-probe\",\"accel\":\"%s\",\"probe_us\":%lld,\"kernel_ips\":%lld,"
               "\"user_ips\":%lld}\n",
               ai.name, (long long)ai.probe_us, (long long)ai.kernel_ips, (long long)ai.user_ips);
        assert_true(ai.reason[0] != 0);
        assert_int_equal(ai.min_ips, MV_KVM_MIN_IPS);
        kvm_runs = ai.kernel_ips > 0 || ai.user_ips > 0;
        if (!kvm_runs) {
                printf("# no probe guest ran here (%s): tcg\n", ai.reason);
                assert_string_equal(ai.name, "tcg");
                return;
        }
        assert_true(ai.probe_us > 0);
        assert_string_equal(ai.name, ai.kernel_ips >= MV_KVM_MIN_IPS ? "kvm" : "tcg");
        struct stat st;
        if (stat("/sys/module/kvm_pvm", &st) == 0) {
                printf("# kvm_pvm is loaded: guest kernel mode is emulated, the verdict must be tcg\n");
                assert_string_equal(ai.name, "tcg");
                assert_non_null(strstr(ai.reason, "instruction emulator"));
                assert_non_null(strstr(ai.reason, "PVM"));
                assert_true(ai.user_ips > 10 * ai.kernel_ips);
        }
}

static void test_threshold_both_ways(void **state) {
        (void)state;
        if (!kvm_runs)
                skip();
        printf("# threshold 1 instruction/s: any KVM that runs the guest passes\n");
        struct rt_accel_info lo, hi;
        assert_int_equal(mv_accel_probe(1, &lo), 0);
        show("min 1/s", &lo);
        assert_string_equal(lo.name, "kvm");
        assert_true(lo.kernel_ips >= 1);
        printf("# threshold 10^15/s: no KVM passes, and the reason gives the rate\n");
        assert_int_equal(mv_accel_probe(1000000000000000LL, &hi), 0);
        show("min 1e15/s", &hi);
        assert_string_equal(hi.name, "tcg");
        assert_non_null(strstr(hi.reason, "below the threshold"));
}

static void test_cache(void **state) {
        (void)state;
        printf("# explicit settings need no probe; a bad one is refused\n");
        struct rt_accel_info ai, again;
        assert_int_equal(mv_accel_decide(dir, "tcg", &ai), 0);
        assert_string_equal(ai.name, "tcg");
        assert_string_equal(ai.reason, "SPACE_MICROVM_ACCEL=tcg");
        assert_int_equal(ai.probe_us, 0);
        assert_int_equal(mv_accel_decide(dir, "kvm", &ai), 0);
        assert_string_equal(ai.name, "kvm");
        assert_int_equal(mv_accel_decide(dir, "fast", &ai), -EINVAL);
        printf("#   %s\n", runtime_last_error());
        assert_non_null(strstr(runtime_last_error(), "expected auto, kvm or tcg"));
        setenv("SPACE_MICROVM_KVM_MIN_IPS", "lots", 1);
        assert_int_equal(mv_accel_decide(dir, "auto", &ai), -EINVAL);
        printf("#   %s\n", runtime_last_error());

        printf("# auto: the first decision probes and writes accel.json, the next one reads it\n");
        setenv("SPACE_MICROVM_KVM_MIN_IPS", kvm_runs ? "1" : "100000000", 1);
        assert_int_equal(mv_accel_decide(dir, NULL, &ai), 0);
        show("first", &ai);
        assert_false(ai.cached);
        assert_true(ai.probe_us > 0);
        assert_string_equal(ai.name, kvm_runs ? "kvm" : "tcg");
        char p[512], text[4096];
        PJ(p, "%s/accel.json", dir);
        assert_true(rt_read_file(p, text, sizeof text) > 0);
        assert_int_equal(mv_accel_decide(dir, "auto", &again), 0);
        show("second", &again);
        assert_true(again.cached);
        assert_int_equal(again.probe_us, 0);
        assert_string_equal(again.name, ai.name);
        assert_string_equal(again.reason, ai.reason);
        assert_int_equal(again.kernel_ips, ai.kernel_ips);

        printf("# a verdict from another host boot is not used\n");
        char *b = strstr(text, "boot=");
        assert_non_null(b);
        b[5] = b[5] == '0' ? '1' : '0';
        assert_int_equal(rt_write_file(p, text), 0);
        assert_int_equal(mv_accel_decide(dir, "auto", &again), 0);
        assert_false(again.cached);

        printf("# another threshold is another verdict\n");
        setenv("SPACE_MICROVM_KVM_MIN_IPS", "1000000000000000", 1);
        assert_int_equal(mv_accel_decide(dir, "auto", &again), 0);
        show("min 1e15/s", &again);
        assert_false(again.cached);
        assert_string_equal(again.name, "tcg");

        printf("# a failed KVM boot marks the cache: tcg, with why, until the host reboots\n");
        setenv("SPACE_MICROVM_KVM_MIN_IPS", "1", 1);
        assert_int_equal(mv_accel_decide(dir, "auto", &ai), 0);
        assert_int_equal(mv_accel_mark_failed(dir, "a KVM boot did not reach HELLO (test)"), 0);
        assert_int_equal(mv_accel_decide(dir, "auto", &again), 0);
        show("after a failed boot", &again);
        assert_true(again.cached);
        assert_string_equal(again.name, "tcg");
        assert_string_equal(again.reason, "a KVM boot did not reach HELLO (test)");
        assert_int_equal(again.kernel_ips, ai.kernel_ips);
        unsetenv("SPACE_MICROVM_KVM_MIN_IPS");
}

static void test_public(void **state) {
        (void)state;
        printf("# rt_microvm_accel_info (default auto, default threshold) decides once per process\n");
        setenv("SPACE_GUEST_DIR", dir, 1);
        unsetenv("SPACE_MICROVM_ACCEL");
        struct rt_accel_info a, b;
        assert_int_equal(rt_microvm_accel_info(&a), 0);
        show("public", &a);
        assert_int_equal(rt_microvm_accel_info(&b), 0);
        assert_memory_equal(&a, &b, sizeof a);
        assert_string_equal(rt_microvm_accel(), a.name);
        if (kvm_runs)
                assert_string_equal(a.name, a.kernel_ips >= MV_KVM_MIN_IPS ? "kvm" : "tcg");
        setenv("SPACE_MICROVM_ACCEL", "tcg", 1);
        assert_string_equal(rt_microvm_accel(), "tcg");
        setenv("SPACE_MICROVM_ACCEL", "nope", 1);
        assert_string_equal(rt_microvm_accel(), "invalid");
        unsetenv("SPACE_MICROVM_ACCEL");
}

static int setup(void **state) {
        (void)state;
        PJ(dir, "/tmp/space-accel-XXXXXX");
        assert_non_null(mkdtemp(dir));
        return 0;
}

static int teardown(void **state) {
        (void)state;
        return rt_rm_rf(dir) < 0 ? -1 : 0;
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_probe_here),
                cmocka_unit_test(test_threshold_both_ways),
                cmocka_unit_test(test_cache),
                cmocka_unit_test(test_public),
        };
        return cmocka_run_group_tests(tests, setup, teardown);
}
