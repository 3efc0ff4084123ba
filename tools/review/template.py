"""One synthesized CloudFormation template, read the way the CDK's diff prints it: resources by their
construct path, intrinsics as ``${Path.Attr}``."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

# Properties that name a resource, in the order they are preferred as its display name.
NAME_PROPERTIES = ("RoleName", "BucketName", "AlarmName", "TopicName", "QueueName", "FunctionName",
                   "ManagedPolicyName", "PolicyName", "DashboardName", "Name", "NodegroupName", "ClusterName",
                   "AddonName", "AliasName", "DomainName")

_EXPORT = re.compile(r"^(?P<stack>[^:]+):ExportsOutput(?:FnGetAtt|Ref)(?P<id>.+?[0-9A-F]{8})(?P<attr>[A-Za-z]*)"
                     r"[0-9A-F]{8}$")


@dataclass(frozen=True)
class Template:
    stack: str
    body: dict[str, Any]

    @classmethod
    def empty(cls, stack: str) -> Template:
        return cls(stack, {"Resources": {}})

    @property
    def resources(self) -> dict[str, dict[str, Any]]:
        return self.body.get("Resources", {}) or {}

    def resource(self, logical_id: str) -> dict[str, Any] | None:
        return self.resources.get(logical_id)

    def type_of(self, logical_id: str) -> str | None:
        resource = self.resource(logical_id)
        return resource.get("Type") if resource else None

    def properties(self, logical_id: str) -> dict[str, Any]:
        resource = self.resource(logical_id)
        return (resource or {}).get("Properties", {}) or {}

    def path(self, logical_id: str) -> str:
        """The construct path without the stack and a trailing ``/Resource`` (as ``cdk diff`` shows it)."""
        resource = self.resource(logical_id) or {}
        path = (resource.get("Metadata") or {}).get("aws:cdk:path")
        if not isinstance(path, str):
            return logical_id
        parts = path.split("/")
        if len(parts) > 1 and parts[0] == self.stack:
            parts = parts[1:]
        if len(parts) > 1 and parts[-1] in ("Resource", "Default"):
            parts = parts[:-1]
        return "/".join(parts)

    def name(self, logical_id: str) -> str:
        """A literal name the resource is given (role name, bucket name, ...), else its construct path."""
        properties = self.properties(logical_id)
        for key in NAME_PROPERTIES:
            value = properties.get(key)
            if isinstance(value, str) and value:
                return value
        return self.path(logical_id)

    # ---- intrinsics ---------------------------------------------------------------------------

    def render(self, value: Any) -> Any:
        """Intrinsics as readable strings (``${CaptureStorage/CaptureBucket.Arn}``); structure kept."""
        if isinstance(value, list):
            return [self.render(item) for item in value]
        if not isinstance(value, dict):
            return value
        if len(value) == 1:
            (function, argument), = value.items()
            text = self._intrinsic(function, argument)
            if text is not None:
                return text
        return {key: self.render(item) for key, item in value.items()}

    def text(self, value: Any) -> str:
        rendered = self.render(value)
        return rendered if isinstance(rendered, str) else json.dumps(rendered, sort_keys=True)

    def _intrinsic(self, function: str, argument: Any) -> str | None:
        if function == "Ref" and isinstance(argument, str):
            return f"${{{argument if argument.startswith('AWS::') else self.path(argument)}}}"
        if function == "Fn::GetAtt":
            parts = argument if isinstance(argument, list) else str(argument).split(".", 1)
            if len(parts) == 2 and isinstance(parts[0], str):
                return f"${{{self.path(parts[0])}.{self.text(parts[1])}}}"
        if function == "Fn::Join" and isinstance(argument, list) and len(argument) == 2:
            separator, parts = argument
            if isinstance(parts, list):
                return str(separator).join(self.text(part) for part in parts)
        if function == "Fn::Sub":
            return argument if isinstance(argument, str) else self.text(argument[0]) if argument else ""
        if function == "Fn::Select" and isinstance(argument, list) and len(argument) == 2:
            index, source = argument
            if isinstance(source, dict) and "Fn::Split" in source:
                separator, whole = source["Fn::Split"]
                if separator == ":oidc-provider/" and str(index) == "1":
                    return f"{self.text(whole)}.issuer".replace("}.issuer", ".issuer}")
                return f"${{part {index} of {self.text(whole)} split at {separator!r}}}"
            return f"${{item {index} of {self.text(source)}}}"
        if function == "Fn::ImportValue":
            name = self.text(argument)
            # The CDK's cross-stack exports: <stack>:ExportsOutput(FnGetAtt|Ref)<logical id><attribute><hash>
            export = _EXPORT.match(name)
            if export:
                attribute = f".{export['attr']}" if export["attr"] else ""
                return f"${{{export['stack']}:{export['id']}{attribute}}}"
            return f"${{import {name}}}"
        if function == "Fn::If" and isinstance(argument, list) and len(argument) == 3:
            condition, when, otherwise = argument
            return f"${{if {condition}: {self.text(when)} else {self.text(otherwise)}}}"
        if function == "Fn::FindInMap":
            return f"${{map {'/'.join(self.text(part) for part in argument)}}}"
        return None

    def resolve_json(self, value: Any) -> Any:
        """The value of a ``Custom::AWSCDKCfnJson`` referenced by ``Fn::GetAtt [id, Value]`` (the CDK keeps
        IRSA trust conditions there, whose keys hold tokens), rendered; anything else rendered as is."""
        if isinstance(value, dict) and list(value) == ["Fn::GetAtt"]:
            target = value["Fn::GetAtt"]
            if isinstance(target, list) and len(target) == 2 and target[1] == "Value" \
                    and self.type_of(target[0]) == "Custom::AWSCDKCfnJson":
                inner = self.properties(target[0]).get("Value")
                rendered = self.render(inner)
                if isinstance(rendered, str):
                    try:
                        return json.loads(rendered)
                    except ValueError:
                        return rendered
                return rendered
        return self.render(value)

    def references(self, logical_id: str) -> set[str]:
        """Logical ids of the resources whose properties refer to ``logical_id`` (Ref or GetAtt)."""
        found: set[str] = set()

        def walk(value: Any) -> bool:
            if isinstance(value, dict):
                if value.get("Ref") == logical_id:
                    return True
                target = value.get("Fn::GetAtt")
                if isinstance(target, list) and target and target[0] == logical_id:
                    return True
                return any(walk(item) for item in value.values())
            if isinstance(value, list):
                return any(walk(item) for item in value)
            return False

        for other, resource in self.resources.items():
            if other != logical_id and walk(resource.get("Properties", {})):
                found.add(other)
        return found
