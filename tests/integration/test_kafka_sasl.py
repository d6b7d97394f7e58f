"""test_kafka_sasl.py: cdc's Kafka producer with SASL, against the mock cluster behind
tests/kafka/sasl_gateway.py (librdkafka 2.0.2's mock has no SASL at all: no SaslHandshake or
SaslAuthenticate handler; the gateway answers those as Kafka's protocol guide says, and passes the
rest to the mock):

- SASL/PLAIN and SCRAM-SHA-256 over SASL_PLAINTEXT, the password from a file ({file: PATH}): the
  row is delivered, the gateway saw cdc authenticate;
- a wrong password: refused, said once in cdc's log with what to check, in /readyz, nothing
  delivered, the password never printed;
- the password changes on the broker's side: cdc's next authentications fail until its file holds
  the new one and a SIGHUP reads it again (rd_kafka_sasl_set_credentials), without a restart.
"""

import json
import os
import signal

import pytest

from conftest import wait_for
from test_status import http

RIGHT, WRONG, NEXT = "Sasl-right-S3cr3t-77a1", "Sasl-wrong-S3cr3t-0b0b", "Sasl-next-S3cr3t-5c5c"


def secret(tmp_path, name, text):
    path = os.path.join(str(tmp_path), name)
    with open(path, "w") as f:
        f.write(text + "\n")
    os.chmod(path, 0o600)
    return path


def sasl_cdc(pg, schema, cdc, gateway, mechanism, password_file, topic):
    pg.sql(f"create table {schema}.k (id int primary key)")
    return cdc(subscriptions=[{"name": "k", "tables": [f"{schema}.k"], "sink": "kafka", "topic": topic}],
               kafka={"brokers": gateway.bootstrap,
                      "properties": {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": mechanism,
                                     "sasl.username": "cdc", "sasl.password": {"file": password_file},
                                     "linger.ms": "5", "reconnect.backoff.max.ms": "500"}})


def readyz(c):
    return http((c.config["status"]["socket"], "/readyz"))


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256"])
def test_sasl_delivers(pg, schema, cdc, kafka_sasl, kafka_reader, tmp_path, mechanism):
    broker_pw = secret(tmp_path, "broker", RIGHT)
    gateway = kafka_sasl("cdc", broker_pw)
    topic = f"sasl.{mechanism.lower()}.{os.getpid()}"
    c = sasl_cdc(pg, schema, cdc, gateway, mechanism, secret(tmp_path, "cdc", RIGHT), topic)
    reader = kafka_reader([topic])
    p = c.start()
    pg.sql(f"insert into {schema}.k values (1)")
    assert [(m.event.table, m.header("cdc-op")) for m in reader.wait(1, 30)] == [("k", "insert")]
    assert f"auth ok user=cdc mechanism={mechanism}" in gateway.log()
    assert "auth failed" not in gateway.log()
    assert p.terminate() == 0
    assert RIGHT not in p.stderr()


def test_a_wrong_password_is_refused_clearly(pg, schema, cdc, kafka_sasl, kafka_reader, tmp_path):
    gateway = kafka_sasl("cdc", secret(tmp_path, "broker", RIGHT))
    topic = f"sasl.wrong.{os.getpid()}"
    c = sasl_cdc(pg, schema, cdc, gateway, "PLAIN", secret(tmp_path, "cdc", WRONG), topic)
    reader = kafka_reader([topic])
    p = c.start()
    pg.sql(f"insert into {schema}.k values (1)")
    wait_for(lambda: "a broker refused cdc's credentials" in p.stderr(), 30, what=p.describe())
    line = next(x for x in p.stderr().splitlines() if "a broker refused cdc's credentials" in x)
    assert line.split(" ", 1)[1].startswith(
        "error kafka: a broker refused cdc's credentials; cdc retries and delivers nothing to Kafka meanwhile: "
        "check sasl.mechanism, sasl.username and sasl.password in kafka.properties (a reload applies the "
        "username and password) reason=\"sasl_plaintext://127.0.0.2:"), line
    assert "SASL authentication error: Authentication failed: Invalid username or password" in line
    refused = (503, "kafka: a broker refused cdc's SASL credentials (kafka.properties sasl.username and "
                    "sasl.password)\n")
    wait_for(lambda: readyz(c) == refused, 10, what=f"/readyz: {readyz(c)}")  # published every second
    wait_for(lambda: gateway.log().count("auth failed user=cdc mechanism=PLAIN") >= 3, 30,
             what="cdc retrying")
    assert p.stderr().count("a broker refused cdc's credentials") == 1  # said once
    assert reader.snapshot() == []
    st = json.loads(http((c.config["status"]["socket"], "/status"))[1])
    assert (st["kafka"]["delivered"], st["kafka"]["in_flight"]) == (0, 1)
    p.kill()  # a stop would wait 30 s for the message in flight
    assert WRONG not in p.stderr() and RIGHT not in p.stderr()


def test_the_password_file_is_read_again_on_sighup(pg, schema, cdc, kafka_sasl, kafka_reader, tmp_path):
    broker_pw = secret(tmp_path, "broker", RIGHT)
    cdc_pw = secret(tmp_path, "cdc", RIGHT)
    gateway = kafka_sasl("cdc", broker_pw)
    topic = f"sasl.rotate.{os.getpid()}"
    c = sasl_cdc(pg, schema, cdc, gateway, "SCRAM-SHA-256", cdc_pw, topic)
    reader = kafka_reader([topic])
    p = c.start()
    pg.sql(f"insert into {schema}.k values (1)")
    assert len(reader.wait(1, 30)) == 1

    # The broker's password changes, and its connections drop: cdc's next authentication fails...
    secret(tmp_path, "broker", NEXT)
    gateway.drop()
    pg.sql(f"insert into {schema}.k values (2)")
    wait_for(lambda: "a broker refused cdc's credentials" in p.stderr(), 30, what=p.describe())
    assert len(reader.snapshot()) == 1
    # ...until cdc's file holds the new one and a SIGHUP reads it: no restart.
    secret(tmp_path, "cdc", NEXT)
    p.signal(signal.SIGHUP)
    wait_for(lambda: "kafka: SASL credentials changed; the next authentication uses them" in p.stderr(), 10,
             what=p.describe())
    assert len(reader.wait(2, 30)) == 2
    wait_for(lambda: readyz(c)[0] == 200, 10, what=f"/readyz: {readyz(c)}")
    assert "take effect at the next restart" not in p.stderr()
    assert p.terminate() == 0
    for s in (RIGHT, NEXT):
        assert s not in p.stderr()
