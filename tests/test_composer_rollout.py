"""Recovery, restart grace and rollout settings map onto the workloads (issue #9)."""

from __future__ import annotations

from composer_support import compose, gang, replica, standalone


def with_(engine: dict, **fields) -> dict:
    engine.update(fields)
    return engine


def test_a_gang_recreates_the_whole_group_on_a_pod_restart_by_default():
    lws = compose(replica(gang())).one("LeaderWorkerSet")
    assert lws["spec"]["leaderWorkerTemplate"]["restartPolicy"] == "RecreateGroupOnPodRestart"


def test_recovery_policy_none_lets_gang_pods_restart_alone():
    lws = compose(replica(with_(gang(), recoveryPolicy="None"))).one("LeaderWorkerSet")
    assert lws["spec"]["leaderWorkerTemplate"]["restartPolicy"] == "None"


def test_restart_grace_period_reaches_every_pod_of_the_engine():
    lws = compose(replica(with_(gang(), restartGracePeriodSeconds=120))).one("LeaderWorkerSet")
    tmpl = lws["spec"]["leaderWorkerTemplate"]
    assert tmpl["leaderTemplate"]["spec"]["terminationGracePeriodSeconds"] == 120
    assert tmpl["workerTemplate"]["spec"]["terminationGracePeriodSeconds"] == 120
    dep = compose(replica(with_(standalone(), restartGracePeriodSeconds=30))).one("Deployment")
    assert dep["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] == 30


def test_a_deployment_never_surges_unless_the_rollout_says_so():
    assert compose(replica(standalone())).one("Deployment")["spec"]["strategy"] == {
        "type": "RollingUpdate", "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1}}
    dep = compose(replica(with_(standalone(copies=4),
                                rollout={"maxSurge": 1, "maxUnavailable": "25%"}))).one("Deployment")
    assert dep["spec"]["strategy"]["rollingUpdate"] == {"maxSurge": 1, "maxUnavailable": "25%"}


def test_a_gang_rollout_becomes_the_leaderworkersets_rolling_update_configuration():
    lws = compose(replica(with_(gang(copies=4), rollout={"maxUnavailable": 2, "partition": 3}))
                  ).one("LeaderWorkerSet")
    assert lws["spec"]["rolloutStrategy"] == {
        "type": "RollingUpdate",
        "rollingUpdateConfiguration": {"maxUnavailable": 2, "partition": 3}}


def test_without_a_rollout_a_gang_keeps_the_leaderworkersets_default_strategy():
    assert "rolloutStrategy" not in compose(replica(gang())).one("LeaderWorkerSet")["spec"]
