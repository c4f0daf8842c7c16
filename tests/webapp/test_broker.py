"""The embedded default's file-system broker hands consumers whole messages only."""

import threading
from queue import Empty

import pytest
from kombu import Connection

from webapp import broker
from webapp.broker import PARTIAL

TRANSPORT = "webapp.broker:Transport"


def test_the_embedded_broker_url_selects_the_atomic_transport():
    # settings.py registers it whenever the broker is the file-system one (the embedded default)
    broker.register()
    connection = Connection("filesystem://")
    assert connection.transport_cls == "filesystem" and connection.transport.Channel is broker.Channel
    assert connection.as_uri().startswith("filesystem://")


def channel(folder, transport=TRANSPORT):
    options = {"data_folder_in": str(folder), "data_folder_out": str(folder)}
    return Connection(transport=transport, transport_options=options).channel()


def race(folder, transport=TRANSPORT, messages=60):
    """Publish large messages while a consumer polls the folder in a tight loop; what it got."""
    payload = "x" * 2_000_000  # keeps each write open long enough to be listed mid-write
    producer, consumer = channel(folder, transport), channel(folder, transport)
    received: list[dict] = []
    errors: list[Exception] = []
    published = threading.Event()

    def consume():
        while len(received) + len(errors) < messages:
            try:
                received.append(consumer._get("verify"))
            except Empty:
                if published.is_set() and not any(folder.glob("*.msg*")):
                    return
            except Exception as exc:  # a message kombu could not decode: lost
                errors.append(exc)

    thread = threading.Thread(target=consume)
    thread.start()
    for i in range(messages):
        producer._put("verify", {"body": payload, "index": i})
    published.set()
    thread.join(timeout=120)
    return received, errors, payload


def test_a_consumer_racing_the_publisher_receives_every_message_whole(tmp_path):
    received, errors, payload = race(tmp_path)
    assert errors == []
    assert sorted(m["index"] for m in received) == list(range(60))
    assert all(m["body"] == payload for m in received)
    assert not list(tmp_path.glob(f"*{PARTIAL}"))


def test_a_message_still_being_written_is_invisible_to_consumers(tmp_path):
    ch = channel(tmp_path)
    (tmp_path / f"1_abc.verify.msg{PARTIAL}").write_text('{"body": "half')
    with pytest.raises(Empty):
        ch._get("verify")
    ch._put("verify", {"index": 1})
    assert ch._get("verify") == {"index": 1}


def test_two_workers_on_different_queues_each_receive_their_own_messages(tmp_path):
    # make run: the web publishes to each queue's exchange; the job worker consumes gpu and cpu, the
    # verify worker verify, each through a connection of its own, sharing only the folders (the
    # bindings live in the control folder, so a publisher routes by what the consumers declared).
    from kombu import Consumer, Exchange, Producer, Queue

    options = {
        "data_folder_in": str(tmp_path / "queue"),
        "data_folder_out": str(tmp_path / "queue"),
        "control_folder": str(tmp_path / "control"),
        "store_processed": False,
    }
    for folder in ("queue", "control"):
        (tmp_path / folder).mkdir()
    queues = {name: Queue(name, Exchange(name, type="direct"), routing_key=name) for name in ("gpu", "cpu", "verify")}
    received: dict[str, list[tuple[str, str]]] = {"jobs": [], "verify": []}

    def consumer(name: str, consumed: list[str]) -> tuple[Connection, Consumer]:
        connection = Connection(transport=TRANSPORT, transport_options=options)
        own = [queues[q] for q in consumed]
        taker = Consumer(
            connection.channel(),
            own,
            callbacks=[lambda body, message: (received[name].append((body["queue"], body["n"])), message.ack())],
            accept=["json"],
        )
        taker.consume()
        return connection, taker

    jobs_connection, _ = consumer("jobs", ["gpu", "cpu"])
    verify_connection, _ = consumer("verify", ["verify"])
    web = Connection(transport=TRANSPORT, transport_options=options)
    producer = Producer(web.channel(), serializer="json")
    for n in range(3):
        for name, queue in queues.items():
            producer.publish({"queue": name, "n": n}, exchange=queue.exchange, routing_key=name, declare=[queue])

    for connection in (jobs_connection, verify_connection):
        for _ in range(20):
            try:
                connection.drain_events(timeout=0.5)
            except TimeoutError:
                break
    # Every message reaches the worker of its queue and no other; the file-system transport orders
    # messages published within one clock tick by a random file name, so the order is not asserted.
    assert sorted(received["jobs"]) == sorted((q, n) for q in ("gpu", "cpu") for n in range(3))
    assert sorted(received["verify"]) == [("verify", n) for n in range(3)]
